//! katcp v5 messages: one line each, `?name[mid] arg arg...` (request), `!name[mid] ok|fail|invalid
//! ...` (reply) or `#name[mid] ...` (inform). Arguments are bytes, separated by spaces or tabs,
//! with `\\ \_ \0 \n \r \e \t` standing for backslash, space, NUL, newline, carriage return,
//! escape and tab, and `\@` for an empty argument.

/// What a message is: `?` request, `!` reply or `#` inform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `?name`: asks for a reply.
    Request,
    /// `!name`: answers a request of the same name.
    Reply,
    /// `#name`: information, on its own or before a reply.
    Inform,
}

impl Kind {
    fn sigil(self) -> u8 {
        match self {
            Kind::Request => b'?',
            Kind::Reply => b'!',
            Kind::Inform => b'#',
        }
    }
}

/// The largest message id katcp allows (ids run from 1 to 2^31 - 1).
pub const MAX_MID: u32 = (1 << 31) - 1;

/// One katcp message, its arguments unescaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Request, reply or inform.
    pub kind: Kind,
    /// The name: a letter, then letters, digits and dashes.
    pub name: String,
    /// The message id, echoed in the reply and the informs that answer a request.
    pub mid: Option<u32>,
    /// The arguments, as bytes.
    pub args: Vec<Vec<u8>>,
}

/// Why a line is not a katcp message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The line does not start with `?`, `!` or `#`.
    #[error("a katcp message starts with ?, ! or #.")]
    Sigil,
    /// The name is empty or has a character other than letters, digits and dashes.
    #[error("a katcp message name is a letter followed by letters, digits and dashes.")]
    Name,
    /// The id between brackets is not a number from 1 to 2^31 - 1.
    #[error("a katcp message id is a number from 1 to 2147483647 between brackets.")]
    Mid,
    /// A backslash followed by something other than `\ _ 0 n r e t @`.
    #[error("an argument has an unknown escape (katcp knows \\\\ \\_ \\0 \\n \\r \\e \\t \\@).")]
    Escape,
    /// A NUL or escape character that is not escaped.
    #[error("an argument has a raw NUL or escape character (write \\0 or \\e).")]
    RawControl,
}

/// Whether `name` is a valid message (or sensor) name.
pub fn valid_name(name: &[u8]) -> bool {
    matches!(name.first(), Some(c) if c.is_ascii_alphabetic())
        && name.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
}

impl Message {
    /// A message of `kind` called `name` with `args`.
    pub fn new<A: AsRef<[u8]>>(
        kind: Kind,
        name: &str,
        mid: Option<u32>,
        args: impl IntoIterator<Item = A>,
    ) -> Self {
        Self {
            kind,
            name: name.to_string(),
            mid,
            args: args.into_iter().map(|a| a.as_ref().to_vec()).collect(),
        }
    }

    /// An inform called `name`, with no id.
    pub fn inform<A: AsRef<[u8]>>(name: &str, args: impl IntoIterator<Item = A>) -> Self {
        Self::new(Kind::Inform, name, None, args)
    }

    /// Reads one line (its newline, if any, already removed). Never panics.
    pub fn parse(line: &[u8]) -> Result<Self, ParseError> {
        let kind = match line.first() {
            Some(b'?') => Kind::Request,
            Some(b'!') => Kind::Reply,
            Some(b'#') => Kind::Inform,
            _ => return Err(ParseError::Sigil),
        };
        // The name follows the sigil at once; then arguments, any run of spaces and tabs between.
        let mut fields = line[1..].split(|c| *c == b' ' || *c == b'\t');
        let head = fields.next().unwrap_or_default();
        let fields = fields.filter(|f| !f.is_empty());
        let (name, mid) = match head.iter().position(|c| *c == b'[') {
            None => (head, None),
            Some(i) => (&head[..i], Some(parse_mid(&head[i..])?)),
        };
        if !valid_name(name) {
            return Err(ParseError::Name);
        }
        let args = fields.map(unescape).collect::<Result<_, _>>()?;
        Ok(Self {
            kind,
            // valid_name admits ASCII only.
            name: String::from_utf8_lossy(name).into_owned(),
            mid,
            args,
        })
    }

    /// The message as one line, newline included.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            self.name.len() + 16 + self.args.iter().map(|a| a.len() + 1).sum::<usize>(),
        );
        out.push(self.kind.sigil());
        out.extend_from_slice(self.name.as_bytes());
        if let Some(mid) = self.mid {
            out.extend_from_slice(format!("[{mid}]").as_bytes());
        }
        for a in &self.args {
            out.push(b' ');
            escape_into(a, &mut out);
        }
        out.push(b'\n');
        out
    }

    /// Argument `i` as text, if it is there and UTF-8.
    pub fn arg_str(&self, i: usize) -> Option<&str> {
        self.args.get(i).and_then(|a| std::str::from_utf8(a).ok())
    }
}

/// `[n]` with n from 1 to 2^31 - 1.
fn parse_mid(b: &[u8]) -> Result<u32, ParseError> {
    let digits = b
        .strip_prefix(b"[")
        .and_then(|b| b.strip_suffix(b"]"))
        .ok_or(ParseError::Mid)?;
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ParseError::Mid);
    }
    let n: u64 = digits.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0'));
    if n == 0 || n > u64::from(MAX_MID) {
        return Err(ParseError::Mid);
    }
    Ok(n as u32)
}

/// One argument as written, unescaped.
fn unescape(field: &[u8]) -> Result<Vec<u8>, ParseError> {
    if field == b"\\@" {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(field.len());
    let mut bytes = field.iter();
    while let Some(&c) = bytes.next() {
        match c {
            b'\\' => out.push(match bytes.next() {
                Some(b'\\') => b'\\',
                Some(b'_') => b' ',
                Some(b'0') => 0,
                Some(b'n') => b'\n',
                Some(b'r') => b'\r',
                Some(b'e') => 0x1b,
                Some(b't') => b'\t',
                // \@ inside a longer argument stands for nothing, as aiokatcp reads it.
                Some(b'@') => continue,
                _ => return Err(ParseError::Escape),
            }),
            0 | 0x1b => return Err(ParseError::RawControl),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Writes `arg` escaped; an empty argument as `\@`.
fn escape_into(arg: &[u8], out: &mut Vec<u8>) {
    if arg.is_empty() {
        out.extend_from_slice(b"\\@");
        return;
    }
    for &c in arg {
        let esc = match c {
            b'\\' => b'\\',
            b' ' => b'_',
            0 => b'0',
            b'\n' => b'n',
            b'\r' => b'r',
            0x1b => b'e',
            b'\t' => b't',
            c => {
                out.push(c);
                continue;
            }
        };
        out.extend_from_slice(&[b'\\', esc]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(m: &Message) -> String {
        String::from_utf8(m.encode()).unwrap()
    }

    #[test]
    fn every_escape_is_written_and_read() {
        let m = Message::new(
            Kind::Reply,
            "sensor-value",
            Some(7),
            [&b"ok"[..], b"a b\\c\0d\ne\rf\x1bg\th", b""],
        );
        let l = line(&m);
        assert_eq!(
            l,
            "!sensor-value[7] ok a\\_b\\\\c\\0d\\ne\\rf\\eg\\th \\@\n"
        );
        assert_eq!(Message::parse(l.trim_end().as_bytes()).unwrap(), m);
    }

    #[test]
    fn requests_read_with_ids_tabs_and_extra_spaces() {
        let m = Message::parse(b"?gain[12]  wideband\t0 1+2j ").unwrap();
        assert_eq!(m.kind, Kind::Request);
        assert_eq!(m.name, "gain");
        assert_eq!(m.mid, Some(12));
        assert_eq!(
            m.args,
            vec![b"wideband".to_vec(), b"0".to_vec(), b"1+2j".to_vec()]
        );
        assert_eq!(m.arg_str(2), Some("1+2j"));
        let m = Message::parse(b"#version-connect katcp-protocol 5.1-MIB").unwrap();
        assert_eq!((m.kind, m.mid, m.args.len()), (Kind::Inform, None, 2));
    }

    #[test]
    fn bad_lines_are_refused_with_a_sentence() {
        for (l, want) in [
            (&b""[..], ParseError::Sigil),
            (b"help", ParseError::Sigil),
            (b"?", ParseError::Name),
            (b"? help", ParseError::Name),
            (b"?1help", ParseError::Name),
            (b"?he_lp", ParseError::Name),
            (b"?help[0]", ParseError::Mid),
            (b"?help[2147483648]", ParseError::Mid),
            (b"?help[99999999999999999999]", ParseError::Mid),
            (b"?help[1", ParseError::Mid),
            (b"?help[1]x", ParseError::Mid),
            (b"?help[]", ParseError::Mid),
            (b"?help a\\x", ParseError::Escape),
            (b"?help a\\", ParseError::Escape),
            (b"?help a\0", ParseError::RawControl),
        ] {
            let e = Message::parse(l).unwrap_err();
            assert_eq!(e, want, "{}", String::from_utf8_lossy(l));
            assert!(e.to_string().ends_with('.'));
        }
        assert_eq!(
            Message::parse(b"?help[2147483647]").unwrap().mid,
            Some(MAX_MID)
        );
    }

    proptest! {
        /// Any message encodes to one line that reads back as itself.
        #[test]
        fn any_message_round_trips(
            kind in prop_oneof![Just(Kind::Request), Just(Kind::Reply), Just(Kind::Inform)],
            name in "[a-zA-Z][a-zA-Z0-9-]{0,20}",
            mid in proptest::option::of(1..=MAX_MID),
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 0..6),
        ) {
            let m = Message { kind, name, mid, args };
            let l = m.encode();
            prop_assert_eq!(l.iter().filter(|c| **c == b'\n' || **c == b'\r').count(), 1);
            prop_assert_eq!(Message::parse(&l[..l.len() - 1]).unwrap(), m);
        }

        /// Any bytes either parse or are refused; nothing panics.
        #[test]
        fn any_line_parses_or_is_refused(line in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(m) = Message::parse(&line) {
                prop_assert!(valid_name(m.name.as_bytes()));
            }
        }
    }
}
