//! One katcp line through `katcp_server::Message::parse`: no panic; a refusal is a sentence; a
//! message that parses encodes to one line that parses back to itself.
//!
//! Input: the line's bytes (a newline in them ends nothing: the server splits lines first).
#![no_main]

use katcp_server::Message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match Message::parse(data) {
        Ok(m) => {
            let line = m.encode();
            assert_eq!(line.last(), Some(&b'\n'));
            let body = &line[..line.len() - 1];
            assert!(!body.contains(&b'\n') && !body.contains(&b'\r'));
            assert_eq!(Message::parse(body).as_ref(), Ok(&m));
        }
        Err(e) => assert!(e.to_string().ends_with('.')),
    }
});
