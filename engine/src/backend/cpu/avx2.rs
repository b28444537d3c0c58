//! The one place that runs the CPU backend's hot loops compiled for AVX2 where the CPU has it:
//! the default x86-64 target stops at SSE2, and the loops are several times faster with 256-bit
//! registers. The sums come out the same either way (no FMA, the same order), so both copies give
//! the same bits.

/// Proof that the running CPU has AVX2: only [`dispatch`] makes one, after checking.
#[derive(Clone, Copy)]
pub(super) struct Avx2(());

/// Runs `body` in a copy compiled for AVX2, handing it the proof, where the CPU has AVX2; else in
/// the baseline copy with `None`. `body` is inlined into the AVX2 copy, so what it calls must be
/// `#[inline(always)]` for the whole loop to be compiled for AVX2.
#[inline(always)]
pub(super) fn dispatch<R>(body: impl FnOnce(Option<Avx2>) -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { with_avx2(body) };
    }
    body(None)
}

/// `body` compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn with_avx2<R>(body: impl FnOnce(Option<Avx2>) -> R) -> R {
    body(Some(Avx2(())))
}
