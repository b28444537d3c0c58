//! Copies payloads into chunk memory with non-temporal (streaming) stores.
//!
//! Chunk memory is read next by the GPU's DMA (or, much later, by the CPU backend), never by the
//! receive thread, so caching it only costs: an ordinary copy first reads every destination line
//! from memory (read for ownership) and evicts the socket buffers the kernel is about to reuse.
//! Streaming stores write whole lines without reading them. The copy ends with a store fence, so
//! that the bytes are visible to any thread that later takes the chunk through a lock.

/// Copies `src` to `dst`.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes and must not overlap `src`.
pub(super) unsafe fn copy(dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if src.len() >= STREAM_MIN {
        // SAFETY: as this function's contract; SSE2 is part of x86_64.
        unsafe { stream_x86_64(dst, src) };
        return;
    }
    // SAFETY: as this function's contract.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
}

/// Shorter copies are left to memcpy (headers, odd pieces).
#[cfg(target_arch = "x86_64")]
const STREAM_MIN: usize = 512;

#[cfg(target_arch = "x86_64")]
unsafe fn stream_x86_64(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    const LINE: usize = 64;
    let n = src.len();
    let s = src.as_ptr();
    // Plain copies up to the first 16-byte aligned destination byte, and after the last whole
    // 64-byte block.
    let head = dst.align_offset(16).min(n);
    let body = (n - head) / LINE * LINE;
    // SAFETY (whole block): every access is within [0, n) of both buffers (the caller's
    // contract); the streaming stores' addresses are 16-byte aligned (dst + head is, and the
    // steps are multiples of 16).
    unsafe {
        std::ptr::copy_nonoverlapping(s, dst, head);
        let mut i = head;
        while i < head + body {
            let v = [0, 16, 32, 48].map(|k| _mm_loadu_si128(s.add(i + k) as *const __m128i));
            for (k, v) in [0, 16, 32, 48].into_iter().zip(v) {
                _mm_stream_si128(dst.add(i + k) as *mut __m128i, v);
            }
            i += LINE;
        }
        std::ptr::copy_nonoverlapping(s.add(i), dst.add(i), n - i);
        _mm_sfence();
    }
}

#[cfg(test)]
mod tests {
    use super::copy;

    #[test]
    fn copies_every_byte_at_any_alignment_and_length() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for dst_off in [0, 1, 3, 8, 15, 16, 17, 63, 64] {
            for src_off in [0, 1, 5, 16] {
                for len in [0, 1, 15, 16, 63, 511, 512, 513, 1000, 5120, 8192, 8900 - 64] {
                    let mut dst = vec![0xEEu8; 9100];
                    let piece = &src[src_off..src_off + len];
                    // SAFETY: dst has room for the piece at dst_off; the buffers are distinct.
                    unsafe { copy(dst.as_mut_ptr().add(dst_off), piece) };
                    assert_eq!(
                        &dst[dst_off..dst_off + len],
                        piece,
                        "{dst_off} {src_off} {len}"
                    );
                    assert!(dst[..dst_off].iter().all(|&b| b == 0xEE), "before");
                    assert!(dst[dst_off + len..].iter().all(|&b| b == 0xEE), "after");
                }
            }
        }
    }
}
