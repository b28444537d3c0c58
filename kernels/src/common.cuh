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
