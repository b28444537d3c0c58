//! Any bytes: the packet decoder, heap views and descriptor decoder must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spead::{Descriptor, HeapView, Limits, Packet};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Packet::decode(data, &Limits::default()) {
        let _ = p.items().count();
        let _ = p.is_stop();
        if let Ok(h) = HeapView::from_single_packet(&p) {
            for ptr in h.pointers() {
                let _ = h.value(ptr.id());
                let _ = h.immediate(ptr.id());
            }
            let _ = h.descriptors();
        }
    }
    if let Ok(d) = Descriptor::decode(data) {
        // What decodes must encode and decode back to itself.
        assert_eq!(Descriptor::decode(&d.encode()).as_ref(), Ok(&d));
    }
});
