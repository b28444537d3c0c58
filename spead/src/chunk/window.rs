//! The window rules of heap assembly, kept in one place: which ids are too old, which open a new
//! window position, and which mean the sender restarted. The chunk assembler applies them to
//! chunk ids; a count-only assembler (see [`Discard`](super::Discard)) applies the same rules
//! through it, so the harness counts heaps exactly as the engine assembles them.
//!
//! The window holds `len` consecutive ids from `head`. An id ahead of it moves it forward (the
//! caller releases what falls out); an id behind it is too old; an id more than `max_jump` away
//! either way is a restart: the window starts again at that id.

/// What an id does to the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Inside the window (which opens here at the first id).
    Inside,
    /// Ahead of the window, which moved to start at `head`: release every id before it.
    Advanced {
        /// The window's new oldest id.
        head: u64,
    },
    /// Behind the window, but not far enough to be a restart.
    TooOld,
    /// Too far either way: the stream restarted. Release everything; the window now starts at `to`.
    Restart {
        /// The window's oldest id before the restart.
        from: u64,
        /// The id that restarted it, now the window's first.
        to: u64,
    },
}

/// A sliding window of `len` ids (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    len: u64,
    max_jump: u64,
    /// Oldest id the window accepts; `None` until the first id.
    head: Option<u64>,
}

impl Window {
    /// A length of 0 is raised to 1.
    pub fn new(len: usize, max_jump: u64) -> Self {
        Self {
            len: (len as u64).max(1),
            max_jump,
            head: None,
        }
    }

    /// Oldest id the window accepts (`None` before the first id).
    pub fn head(&self) -> Option<u64> {
        self.head
    }

    /// Classifies `id` and moves the window as it says.
    #[inline]
    pub fn admit(&mut self, id: u64) -> Admit {
        let head = *self.head.get_or_insert(id);
        let last = head.saturating_add(self.len - 1);
        if id < head && head - id <= self.max_jump {
            return Admit::TooOld;
        }
        if id >= head && id <= last {
            return Admit::Inside;
        }
        if id < head || id - last > self.max_jump {
            self.head = Some(id);
            return Admit::Restart { from: head, to: id };
        }
        let new_head = id - (self.len - 1);
        self.head = Some(new_head);
        Admit::Advanced { head: new_head }
    }

    /// Starts the window at `to` (a restart the caller recognised); returns the old head.
    pub fn restart(&mut self, to: u64) -> u64 {
        self.head.replace(to).unwrap_or(to)
    }

    /// Moves the start forward to `head`; false (and nothing moves) if it is already there or
    /// beyond.
    pub fn expire_before(&mut self, head: u64) -> bool {
        if self.head.is_some_and(|h| h >= head) {
            return false;
        }
        self.head = Some(head);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_slides_refuses_and_restarts() {
        let mut w = Window::new(2, 10);
        assert_eq!(w.head(), None);
        // The first id opens the window [5, 6].
        assert_eq!(w.admit(5), Admit::Inside);
        assert_eq!(w.admit(6), Admit::Inside);
        assert_eq!(w.head(), Some(5));
        // 8 moves it to [7, 8]: 5 and 6 leave.
        assert_eq!(w.admit(8), Admit::Advanced { head: 7 });
        assert_eq!(w.admit(6), Admit::TooOld);
        assert_eq!(w.admit(7), Admit::Inside);
        // Just within the jump limit ahead: an ordinary advance.
        assert_eq!(w.admit(18), Admit::Advanced { head: 17 });
        // Beyond it ahead, or behind, a restart at that id.
        assert_eq!(w.admit(40), Admit::Restart { from: 17, to: 40 });
        assert_eq!(w.admit(30), Admit::TooOld);
        assert_eq!(w.admit(29), Admit::Restart { from: 40, to: 29 });
        assert_eq!(w.head(), Some(29));
    }

    #[test]
    fn extreme_ids_and_explicit_moves() {
        // Without a jump limit nothing is a restart and nothing overflows.
        let mut w = Window::new(4, u64::MAX);
        assert_eq!(w.admit(u64::MAX - 1), Admit::Inside);
        assert_eq!(w.admit(0), Admit::TooOld);
        assert_eq!(w.admit(u64::MAX), Admit::Inside);
        let mut w = Window::new(0, 5);
        assert_eq!(w.admit(3), Admit::Inside);
        assert_eq!(w.admit(4), Admit::Advanced { head: 4 }, "length 0 is 1");
        assert!(!w.expire_before(4));
        assert!(w.expire_before(6));
        assert_eq!(w.admit(5), Admit::TooOld);
        assert_eq!(w.restart(2), 6);
        assert_eq!(w.admit(2), Admit::Inside);
    }
}
