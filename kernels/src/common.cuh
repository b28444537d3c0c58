// Shared by every kernel. Self-contained for NVRTC: no includes.
//
// Configuration, prepended as #defines by kernels::source():
//   CHANNELS          n, output channels (power of two, >= 16)
//   TAPS              PFB taps T
//   SAMPLE_BITS       8, 10, 12 or 16 (signed, packed most significant bit first)
//   UNZIP             4: the 2n-point real FFT is an n-point complex FFT done as UNZIP
//                     FFTs of FFT_LEN points (cuFFT) plus UNZIP-point FFTs (post-processing)
//   SPECTRA_PER_HEAP  S, spectra per output heap
//   FIR_BLOCK         threads per block of pfb_fir
//   FIR_BATCH         spectra whose new samples pfb_fir loads together
//   PP_ROWS           thread rows per block of postproc (each row does PP_TILE / PP_ROWS spectra)
//   OUT_BITS          8, or 4 (real and imaginary parts packed in one byte)
//   DITHER            1: postproc adds the output dither before rounding

#if UNZIP != 4
#error "the post-processing kernel hard-codes a 4-point FFT: UNZIP must be 4"
#endif

#define STEP (2 * CHANNELS)          // samples per spectrum
#define FFT_LEN (CHANNELS / UNZIP)   // points of each cuFFT transform (A)
#define PAIRS (FFT_LEN / 2)          // post-processing threads per spectrum

typedef unsigned int u32;
typedef unsigned long long u64;

// Byte swap: the samples are big-endian bit streams; a little-endian word load reverses bytes.
__device__ __forceinline__ u32 bswap32(u32 x) { return __byte_perm(x, 0, 0x0123); }

// Plain global stores, for where the compiler cannot see that a pointer is global (past an
// opaque asm that keeps it in registers) or that it is aligned for a vector store; __stwb and
// friends would make them strong (ordered) stores.
__device__ __forceinline__ void st_global(float2 *p, float2 v) {
    asm volatile("st.global.v2.f32 [%0], {%1, %2};" : : "l"(p), "f"(v.x), "f"(v.y));
}
__device__ __forceinline__ void st_global(u32 *p, u32 v) {
    asm volatile("st.global.u32 [%0], %1;" : : "l"(p), "r"(v));
}
__device__ __forceinline__ void st_global(uint4 *p, uint4 v) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" : : "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
__device__ __forceinline__ float2 cadd(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 csub(float2 a, float2 b) { return make_float2(a.x - b.x, a.y - b.y); }
__device__ __forceinline__ float2 cconj(float2 a) { return make_float2(a.x, -a.y); }
// -i * a
__device__ __forceinline__ float2 cmul_mi(float2 a) { return make_float2(a.y, -a.x); }
// exp(i pi x), accurate for exact arguments (our arguments are k/n with n a power of two).
__device__ __forceinline__ float2 expipi(float x) {
    float s, c;
    sincospif(x, &s, &c);
    return make_float2(c, s);
}

#define GROUP_WORDS ((8 * SAMPLE_BITS + 31) / 32) // words that hold 8 samples from a byte boundary

// The 8 samples from sample index s (a multiple of 8: the group starts on a byte boundary), in two
// steps so that a thread can have several groups' loads in flight: the words (byte-swapped), then
// the samples.
__device__ __forceinline__ void load8(const u32 *__restrict__ span, u64 s, u32 (&raw)[GROUP_WORDS + 1]) {
    const u64 w = (s * SAMPLE_BITS) >> 5;
#pragma unroll
    for (int i = 0; i <= GROUP_WORDS; i++) raw[i] = bswap32(__ldg(span + w + i));
}
// N samples from words that start with the first's most significant bit (the last word a zero
// pad, so that a sample may always read the word after its own).
template <int N, int WORDS>
__device__ __forceinline__ void unpack_words(const u32 (&a)[WORDS], float (&v)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) {
        const int b = i * SAMPLE_BITS, k = b >> 5, o = b & 31;
        const u32 top = o + SAMPLE_BITS <= 32 ? a[k] << o : __funnelshift_l(a[k + 1], a[k], o);
        v[i] = (float)((int)top >> (32 - SAMPLE_BITS));
    }
}
__device__ __forceinline__ void unpack8_words(const u32 (&raw)[GROUP_WORDS + 1], u64 s, float (&v)[8]) {
    const u32 sh = (u32)(s * SAMPLE_BITS) & 31u; // a multiple of 8
    u32 a[GROUP_WORDS + 1];
    // a: the group's bits from its first, most significant first.
#pragma unroll
    for (int i = 0; i < GROUP_WORDS; i++) a[i] = __funnelshift_l(raw[i + 1], raw[i], sh);
    a[GROUP_WORDS] = 0;
    unpack_words(a, v);
}
__device__ __forceinline__ void unpack8(const u32 *__restrict__ span, u64 s, float (&v)[8]) {
    u32 raw[GROUP_WORDS + 1];
    load8(span, s, raw);
    unpack8_words(raw, s, v);
}
