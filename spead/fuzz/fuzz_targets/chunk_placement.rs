//! Datagrams placed into chunks: every byte lands inside its own chunk's own slot, once; a slot is
//! flagged present exactly when all its bytes arrived; counters add up; no panic; and the
//! assembler's memory stays bounded (live chunks within the window, and a fixed number of
//! allocations however many datagrams come).
//!
//! The input is a small program: a configuration, then operations (a well-formed packet of a
//! chosen heap, slot, chunk and packet index, possibly broken in one way; raw bytes; the consumer
//! handing a chunk back; the window expired or resynchronised). The placement comes from the input,
//! so chunk ids jump, run backwards, wrap near u64::MAX and name slots outside the chunk.
#![no_main]

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use spead::chunk::{Chunk, ChunkAssembler, ChunkConfig, ChunkEvent, ChunkMemory, Placement};
use spead::packet::encode;
use spead::{items, ItemPointer, Limits, Reject, RejectCounters};

/// Counts the allocations made while `COUNTING` is set (the assembler's own calls).
struct CountingAlloc;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        std::alloc::System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        std::alloc::System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        std::alloc::System.realloc(ptr, layout, new)
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Runs one assembler call with its allocations counted.
fn counted<T>(f: impl FnOnce() -> T) -> T {
    COUNTING.store(true, Relaxed);
    let out = f();
    COUNTING.store(false, Relaxed);
    out
}

/// Chunk memory that checks every write against the placement the assembler was given.
struct Guarded {
    bytes: Vec<u8>,
    /// Which bytes were written since the buffer was (re)issued.
    written: Vec<bool>,
    /// The chunk whose bytes this buffer holds, once written.
    chunk: Option<u64>,
    slot_bytes: usize,
    /// The placement of the packet being added (None outside an add).
    expect: Rc<Cell<Option<Placement>>>,
    /// Bytes written through every buffer.
    total: Rc<Cell<u64>>,
}

impl Guarded {
    fn new(
        len: usize,
        slot_bytes: usize,
        expect: &Rc<Cell<Option<Placement>>>,
        total: &Rc<Cell<u64>>,
    ) -> Self {
        Self {
            bytes: vec![0; len],
            written: vec![false; len],
            chunk: None,
            slot_bytes,
            expect: expect.clone(),
            total: total.clone(),
        }
    }

    fn reset(&mut self) {
        self.written.fill(false);
        self.chunk = None;
    }
}

impl ChunkMemory for Guarded {
    fn size(&self) -> usize {
        self.bytes.len()
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        let at = self
            .expect
            .get()
            .expect("a write outside any packet's placement");
        assert_eq!(
            *self.chunk.get_or_insert(at.chunk),
            at.chunk,
            "one buffer written for two chunks"
        );
        let slot = at.slot * self.slot_bytes..(at.slot + 1) * self.slot_bytes;
        let end = offset + bytes.len();
        assert!(
            slot.start <= offset && end <= slot.end,
            "bytes {offset}..{end} written for slot {} ({slot:?})",
            at.slot
        );
        assert!(
            self.written[offset..end].iter().all(|w| !w),
            "bytes {offset}..{end} written twice"
        );
        self.written[offset..end].fill(true);
        self.bytes[offset..end].copy_from_slice(bytes);
        self.total.set(self.total.get() + bytes.len() as u64);
    }
}

/// The input, read a byte at a time (zeros once it runs out).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |v, _| v << 8 | self.byte() as u64)
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }
}

/// What the checks count while the input runs.
#[derive(Default)]
struct Tally {
    offered: u64,
    accepted_bytes: u64,
    rejected: u64,
    too_old: u64,
    no_buffer: u64,
    present: u64,
    chunks: u64,
    /// Id of the last chunk emitted since the last resync: ids only increase in between.
    last_id: Option<u64>,
}

impl Tally {
    fn result(&mut self, r: Result<(), Reject>, len: usize) {
        self.offered += 1;
        match r {
            Ok(()) => self.accepted_bytes += len as u64,
            Err(reason) => {
                self.rejected += 1;
                self.too_old += u64::from(reason == Reject::TooOld);
                self.no_buffer += u64::from(reason == Reject::NoBuffer);
            }
        }
    }

    /// Checks an emitted chunk against what was written into it.
    fn ready(&mut self, c: &Chunk<Guarded>, slots: usize, slot_bytes: usize) {
        assert_eq!(c.present.len(), slots);
        assert_eq!(
            c.data.chunk,
            Some(c.id),
            "a chunk emitted with another chunk's bytes"
        );
        for (s, &present) in c.present.iter().enumerate() {
            let whole = c.data.written[s * slot_bytes..(s + 1) * slot_bytes]
                .iter()
                .all(|&w| w);
            assert_eq!(
                present, whole,
                "chunk {} slot {s}: present {present}, all bytes {whole}",
                c.id
            );
            self.present += u64::from(present);
        }
        assert!(
            self.last_id.is_none_or(|last| c.id > last),
            "chunk {} after {:?}",
            c.id,
            self.last_id
        );
        self.last_id = Some(c.id);
        self.chunks += 1;
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let (a, b, c, d) = (input.byte(), input.byte(), input.byte(), input.byte());
    let cfg = ChunkConfig {
        slots: 1 + (a & 7) as usize,
        window: 1 + (a >> 3 & 3) as usize,
        max_jump: [0, 3, 64, u64::MAX][(a >> 6) as usize],
        slot_bytes: 1 + b as usize,
        // 0 is raised to 1 and anything above the slot lowered to it: both are tried.
        packet_payload: c as usize,
    };
    // Buffers from the free list (0 to window + 2 of them) or from the caller per chunk.
    let from_caller = d & 0x80 != 0;
    let given = (d & 7) as usize % (cfg.window + 3);
    let hold_max = (d >> 3 & 3) as usize;
    let base = [0, 1000, u64::MAX - 8, 1 << 40][(d >> 5 & 3) as usize];

    let counters = Arc::new(RejectCounters::new());
    let mut asm = ChunkAssembler::<Guarded>::new(cfg, counters.clone());
    let cfg = *asm.config();
    let (slots, slot_bytes, payload) = (cfg.slots, cfg.slot_bytes, cfg.packet_payload);
    let packets_per_slot = slot_bytes.div_ceil(payload);
    let chunk_bytes = asm.chunk_bytes();
    let expect = Rc::new(Cell::new(None));
    let total = Rc::new(Cell::new(0u64));
    if !from_caller {
        for _ in 0..given {
            assert!(asm
                .give(Guarded::new(chunk_bytes, slot_bytes, &expect, &total))
                .is_ok());
        }
    }
    let issued = Cell::new(0usize);
    let mut held: Vec<Chunk<Guarded>> = Vec::with_capacity(8);
    let mut events: Vec<ChunkEvent<Guarded>> = Vec::with_capacity(cfg.window + 8);
    let mut tally = Tally::default();
    let limits = Limits::default();
    let mut buf = [0u8; 512];
    ALLOCATIONS.store(0, Relaxed);

    // Hands every event to the checks; chunks beyond `hold_max` go straight back.
    let settle = |asm: &mut ChunkAssembler<Guarded>,
                  events: &mut Vec<ChunkEvent<Guarded>>,
                  held: &mut Vec<Chunk<Guarded>>,
                  tally: &mut Tally| {
        for e in events.drain(..) {
            match e {
                ChunkEvent::Ready(mut c) => {
                    tally.ready(&c, slots, slot_bytes);
                    if held.len() < hold_max {
                        held.push(c);
                    } else {
                        c.data.reset();
                        give_back(asm, c, from_caller);
                    }
                }
                ChunkEvent::Resync { .. } => tally.last_id = None,
            }
        }
    };

    while !input.0.is_empty() {
        let op = input.byte();
        match op % 8 {
            0..=3 => {
                // A packet of heap `cnt`, placed at (chunk, slot), carrying packet `index` of it.
                let delta = input.byte();
                let chunk = match delta {
                    0xff => input.u64(),
                    _ => base.wrapping_add((delta % 64) as u64),
                };
                let slot = match input.byte() {
                    0xff => usize::MAX,
                    s => s as usize % (slots + 1),
                };
                let index = input.byte() as usize % (packets_per_slot + 1);
                let cnt = input.byte() as u64;
                let flaws = input.byte();
                let offset = index * payload + usize::from(flaws & 1 != 0);
                let mut len = payload.min(slot_bytes.saturating_sub(offset));
                if flaws & 2 != 0 {
                    len = len.saturating_sub(1);
                }
                let size = match flaws >> 2 & 3 {
                    0 | 1 => Some(slot_bytes as u64),
                    2 => Some(slot_bytes as u64 + 1),
                    _ => None,
                };
                let mut pointers = [ItemPointer(0); 4];
                let mut n = 0;
                for p in [
                    Some(ItemPointer::immediate(items::HEAP_CNT, cnt)),
                    size.map(|s| ItemPointer::immediate(items::HEAP_SIZE, s)),
                    Some(ItemPointer::immediate(items::HEAP_OFFSET, offset as u64)),
                    Some(ItemPointer::immediate(items::PAYLOAD_LENGTH, len as u64)),
                ]
                .into_iter()
                .flatten()
                {
                    pointers[n] = p;
                    n += 1;
                }
                let fill = [cnt as u8; 512];
                let Ok(bytes) = encode(&mut buf, &pointers[..n], &fill[..len]) else {
                    continue;
                };
                let at = Placement { chunk, slot };
                let copies = 1 + usize::from(flaws & 0x10 != 0);
                for _ in 0..copies {
                    let datagram = &buf[..bytes];
                    let r = if from_caller {
                        let p = match spead::Packet::decode(datagram, &limits) {
                            Ok(p) => p,
                            Err(reason) => {
                                asm.reject(reason);
                                tally.result(Err(reason), 0);
                                continue;
                            }
                        };
                        let refuse = flaws & 0x20 != 0;
                        let open = |id: u64| {
                            assert_eq!(id, chunk, "a buffer asked for another chunk");
                            if refuse {
                                return Err(Reject::NoBuffer);
                            }
                            // The caller's buffer is not the assembler's allocation.
                            COUNTING.store(false, Relaxed);
                            let g = Guarded::new(chunk_bytes, slot_bytes, &expect, &total);
                            COUNTING.store(true, Relaxed);
                            issued.set(issued.get() + 1);
                            Ok(g)
                        };
                        expect.set(Some(at));
                        let r = counted(|| asm.add_placed(&p, at, open, &mut |e| events.push(e)));
                        expect.set(None);
                        r
                    } else {
                        let missing = flaws & 0x20 != 0;
                        let place = |_: &spead::Packet| {
                            if missing {
                                return Err(Reject::MissingMandatoryItem);
                            }
                            expect.set(Some(at));
                            Ok(at)
                        };
                        let r = counted(|| {
                            asm.add_datagram(datagram, &limits, place, &mut |e| events.push(e))
                        });
                        expect.set(None);
                        r
                    };
                    tally.result(r, len);
                    settle(&mut asm, &mut events, &mut held, &mut tally);
                }
            }
            4 => {
                // Raw bytes: whatever they are, a rejection or a placement inside the chunk.
                let n = input.byte() as usize;
                let raw = input.take(n).to_vec();
                let at = Placement {
                    chunk: base,
                    slot: 0,
                };
                let place = |_: &spead::Packet| {
                    expect.set(Some(at));
                    Ok(at)
                };
                let r = if from_caller {
                    match spead::Packet::decode(&raw, &limits) {
                        Ok(_) => continue,
                        Err(reason) => {
                            asm.reject(reason);
                            Err(reason)
                        }
                    }
                } else {
                    counted(|| asm.add_datagram(&raw, &limits, place, &mut |e| events.push(e)))
                };
                expect.set(None);
                let len = spead::Packet::decode(&raw, &limits).map_or(0, |p| p.payload.len());
                tally.result(r, len);
                settle(&mut asm, &mut events, &mut held, &mut tally);
            }
            5 => {
                // The consumer hands back the oldest chunk it holds.
                if !held.is_empty() {
                    let mut c = held.remove(0);
                    c.data.reset();
                    give_back(&mut asm, c, from_caller);
                }
            }
            6 => {
                let step = input.byte() as u64 % 4;
                if let Some(head) = asm.head() {
                    counted(|| {
                        asm.expire_before(head.saturating_add(step), &mut |e| events.push(e))
                    });
                    settle(&mut asm, &mut events, &mut held, &mut tally);
                }
            }
            _ => {
                let to = base.wrapping_add(input.byte() as u64 % 64);
                counted(|| asm.resync(to, &mut |e| events.push(e)));
                settle(&mut asm, &mut events, &mut held, &mut tally);
            }
        }
        // Memory: the chunks being filled fit the window, and the buffers add up.
        let live = if from_caller {
            issued.get() as u64 - tally.chunks
        } else {
            (given - asm.free_buffers() - held.len()) as u64
        };
        assert!(
            live <= cfg.window as u64,
            "{live} chunks live in a window of {}",
            cfg.window
        );
    }
    counted(|| asm.flush(&mut |e| events.push(e)));
    settle(&mut asm, &mut events, &mut held, &mut tally);

    // Whatever the input, the assembler allocates only per chunk that can exist at once (flags
    // and tracking, and the free lists that keep them), never per datagram or per chunk opened.
    let at_once = if from_caller {
        cfg.window + hold_max + 1
    } else {
        given
    };
    let allocations = ALLOCATIONS.load(Relaxed);
    assert!(
        allocations <= 3 * (cfg.window + at_once) as u64 + 16,
        "{allocations} allocations for {} datagrams, window {}, {at_once} chunks at once",
        tally.offered,
        cfg.window
    );
    let stats = asm.stats();
    assert_eq!(stats.packets.load(Relaxed), tally.offered);
    assert_eq!(stats.bytes.load(Relaxed), total.get());
    assert_eq!(total.get(), tally.accepted_bytes);
    assert_eq!(stats.heaps.load(Relaxed), tally.present);
    assert_eq!(stats.chunks.load(Relaxed), tally.chunks);
    assert_eq!(stats.too_old.load(Relaxed), tally.too_old);
    assert_eq!(stats.no_buffer.load(Relaxed), tally.no_buffer);
    assert_eq!(counters.total(), tally.rejected);
});

/// The consumer is done with a chunk: to the free list, or (caller's buffers) its flags kept.
fn give_back(asm: &mut ChunkAssembler<Guarded>, c: Chunk<Guarded>, from_caller: bool) {
    if from_caller {
        let buffer = counted(|| asm.reclaim(c));
        drop(buffer);
    } else {
        counted(|| asm.recycle(c));
    }
}
