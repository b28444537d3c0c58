// PFB FIR (paper section 3.4): one thread per pair of adjacent columns (t = 2u, 2u+1) of the
// window, for a run of consecutive spectra. The thread keeps its 2T weights and a sliding window of
// T sample pairs in registers: while the coarse delay is constant (offset grows by exactly 2n per
// spectrum) each new spectrum costs one new sample pair; a change of delay reloads the window.
// Runs of FIR_BATCH spectra with one delay load their new samples together (see below).
//
// Samples are unpacked straight from the packed span. The output pair (g_2u, g_2u+1) is the complex
// value z_u of the n-point complex FFT that computes the 2n-point real FFT, written where the
// unzipped FFT wants it (six-step FFT, step 1): sub-sequence j = u mod 4, index i = u / 4.

// Two consecutive samples starting at sample index x of a packed span: one funnel shift over two
// aligned words covers them (2 * SAMPLE_BITS <= 32 bits from any bit position).
// The sample pair whose first bit is bit `sh` (< 32) of word w0, words w0 and w1 as loaded.
__device__ __forceinline__ float2 pair_of(u32 w0, u32 w1, u32 sh) {
    const u32 hi = bswap32(w0), lo = bswap32(w1);
    const u32 top = __funnelshift_l(lo, hi, sh);
    const int s0 = (int)top >> (32 - SAMPLE_BITS);
    const int s1 = (int)(top << SAMPLE_BITS) >> (32 - SAMPLE_BITS);
    return make_float2((float)s0, (float)s1);
}
// The same, from word p[0].
__device__ __forceinline__ float2 pair_at(const u32 *__restrict__ p, u32 sh) {
    const u32 w0 = __ldg(p), w1 = __ldg(p + 1);
    return pair_of(w0, w1, sh);
}

// Where sample x (< 2^32: the host keeps spans under that) starts: the word, and in `sh` its bit
// (mod 32, as the funnel shift takes it). 32-bit arithmetic: sample 32 a + b starts at bit
// 32 SAMPLE_BITS a + SAMPLE_BITS b, so word SAMPLE_BITS a + (t >> 5) and bit t mod 32 with
// t = SAMPLE_BITS b (half the instructions of the 64-bit product).
__device__ __forceinline__ u32 word_of(u32 x, u32 &sh) {
    sh = SAMPLE_BITS * (x & 31u);
    return SAMPLE_BITS * (x >> 5) + (sh >> 5);
}
__device__ __forceinline__ const u32 *sample_word(const u32 *span, u32 x, u32 &sh) { return span + word_of(x, sh); }

// The pair from sample x on.
__device__ __forceinline__ float2 load_pair(const u32 *__restrict__ span, u32 x) {
    u32 sh;
    const u32 *p = sample_word(span, x, sh);
    return pair_at(p, sh);
}

// pfb_fir's own pair load, from a 64-bit bit address. load_pair's 32-bit word arithmetic (fewer
// instructions, which the two-pass kernels gain from) made pfb_fir take 58% longer (465 against
// 295 µs a frame at 32768 channels on an H100, both builds in one run; the compiler gave it 108
// registers a thread rather than 123). The three passes keep the arithmetic they were tuned with.
__device__ __forceinline__ float2 load_pair_wide(const u32 *__restrict__ span, u64 x) {
    const u64 bit = x * SAMPLE_BITS;
    return pair_at(span + (bit >> 5), (u32)bit & 31u);
}

// The window one spectrum on: the oldest pair out, `fresh` in.
__device__ __forceinline__ void slide_in(float2 (&x)[TAPS], float2 fresh) {
#pragma unroll
    for (int j = 0; j < TAPS - 1; j++) x[j] = x[j + 1];
    x[TAPS - 1] = fresh;
}

// The window of column pair u for the spectrum at `off`: slid by one pair if it starts one
// spectrum after `prev` (the delay unchanged), else loaded whole.
__device__ __forceinline__ void window_at(const u32 *__restrict__ span, u32 off, u32 u, u32 prev, float2 (&x)[TAPS]) {
    const u32 base = off + 2 * u;
    if (off == prev + STEP) {
        slide_in(x, load_pair(span, base + STEP * (TAPS - 1)));
    } else {
#pragma unroll
        for (int j = 0; j < TAPS; j++) x[j] = load_pair(span, base + STEP * j);
    }
}

__device__ __forceinline__ float2 fir_sum(const float2 (&x)[TAPS], const float2 (&w)[TAPS]) {
    float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < TAPS; j++) {
        acc.x = fmaf(x[j].x, w[j].x, acc.x);
        acc.y = fmaf(x[j].y, w[j].y, acc.y);
    }
    return acc;
}

extern "C" __global__ void __launch_bounds__(FIR_BLOCK) pfb_fir(
    const u32 *__restrict__ span,       // [pol][stride] packed samples, readable 2 words on
    u64 stride,                         // words from one polarisation's row to the next
    const u32 *__restrict__ offsets,    // [pol][spectra] window start in the span, in samples
    const float2 *__restrict__ weights, // [TAPS][CHANNELS]: (w[2u + 2nj], w[2u + 1 + 2nj])
    float2 *__restrict__ out,           // [pol][spectra][UNZIP][FFT_LEN]
    u32 spectra,
    u32 spectra_per_thread)
{
    const u32 u = blockIdx.x * FIR_BLOCK + threadIdx.x; // column pair, < CHANNELS by construction
    const u32 pol = blockIdx.z;
    const u32 m0 = blockIdx.y * spectra_per_thread;
    if (m0 >= spectra) return;
    const u32 m1 = min(m0 + spectra_per_thread, spectra);

    span += pol * stride;
    offsets += (u64)pol * spectra;
    float2 *dst = out + ((u64)pol * spectra * UNZIP + (u & 3)) * FFT_LEN + (u >> 2);

    float2 w[TAPS];
#pragma unroll
    for (int j = 0; j < TAPS; j++) w[j] = __ldg(weights + j * CHANNELS + u);

    // Prime the window with taps 0..T-2 of the first spectrum, as if the spectrum before it had
    // been computed with the same delay: then every spectrum, the first included, slides.
    float2 x[TAPS];
    const u32 off0 = __ldg(offsets + m0);
#pragma unroll
    for (int j = 0; j < TAPS - 1; j++) x[j + 1] = load_pair_wide(span, (u64)off0 + 2 * u + (u64)STEP * j);
    u32 prev = off0 - STEP; // wraps harmlessly: prev + STEP == off0

    u32 m = m0;
    while (m < m1) {
        // Fast path: the next FIR_BATCH spectra all keep the delay of the last one. Their offsets
        // and new sample pairs are loaded together, so each thread has FIR_BATCH loads in flight
        // instead of one dependent chain per spectrum (the kernel is latency-bound otherwise).
        if (m + FIR_BATCH <= m1) {
            u32 offs[FIR_BATCH];
#pragma unroll
            for (int i = 0; i < FIR_BATCH; i++) offs[i] = __ldg(offsets + m + i);
            bool slide = offs[0] == prev + STEP;
#pragma unroll
            for (int i = 1; i < FIR_BATCH; i++) slide = slide && offs[i] == offs[i - 1] + STEP;
            if (slide) {
                float2 fresh[FIR_BATCH];
#pragma unroll
                for (int i = 0; i < FIR_BATCH; i++)
                    fresh[i] = load_pair_wide(span, (u64)offs[i] + 2 * u + (u64)STEP * (TAPS - 1));
#pragma unroll
                for (int i = 0; i < FIR_BATCH; i++) {
                    slide_in(x, fresh[i]);
                    dst[(u64)(m + i) * (UNZIP * FFT_LEN)] = fir_sum(x, w);
                }
                prev = offs[FIR_BATCH - 1];
                m += FIR_BATCH;
                continue;
            }
        }
        // One spectrum: slide if the delay is unchanged, else reload the whole window.
        const u32 off = __ldg(offsets + m);
        const u64 base = (u64)off + 2 * u;
        if (off == prev + STEP) {
            slide_in(x, load_pair_wide(span, base + (u64)STEP * (TAPS - 1)));
        } else {
#pragma unroll
            for (int j = 0; j < TAPS; j++) x[j] = load_pair_wide(span, base + (u64)STEP * j);
        }
        prev = off;
        dst[(u64)m * (UNZIP * FFT_LEN)] = fir_sum(x, w);
        m++;
    }
}
