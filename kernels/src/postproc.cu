// Post-processing (paper sections 3.6 and 4): the rest of the FFT, then fine delay, fringe phase,
// gain, dither, quantisation and the transpose into heap layout.
//
// The input holds, per polarisation and spectrum, the UNZIP = 4 FFTs of FFT_LEN = A points
// Y_j[k1] = sum_i z_{4i+j} W_A^{i k1}. The n-point FFT of z is then
//   Z[k1 + A k2] = sum_j W_n^{j k1} W_4^{j k2} Y_j[k1]   (twiddles + a 4-point FFT),
// and the 2n-point real FFT of g (z_u = g_2u + i g_2u+1) is
//   X_k = (Z_k + conj Z_{n-k}) / 2 - i e^{-i pi k/n} (Z_k - conj Z_{n-k}) / 2.
// Z_{n-k} for k = k1 + A k2 comes from k1' = A - k1, so one thread takes the pair of columns
// (k1, A - k1) and makes 8 channels from 8 loads (the pair (0, A/2) for thread 0: both self-paired).
//
// A block is PP_TILE pairs x PP_TILE spectra: each thread one pair, PP_TILE / PP_ROWS spectra,
// both polarisations. Results go through shared memory so that the output, which is channel-major
// ([heap][channel][spectrum][pol][re, im]), is written as whole 128-byte lines.
//
// The kernel is close to instruction-bound, so what does not change per spectrum comes from
// tables the host computed in float64 (twiddles), e^{ip} comes per spectrum from the host, the
// gains arrive already halved (the 1/2 of the fix-up), and the small fine-delay rotations use a
// polynomial rather than sincos.

#define PP_TILE 32
#define PP_SLOTS (8 * PP_TILE) // channels per block: 4 values of k2 x 2 sides x PP_TILE pairs

// One output element: both polarisations of one channel and spectrum.
#if OUT_BITS == 4
typedef uchar2 qjones; // per pol one byte: real in the high nibble, imaginary in the low
#define QMAX 7
#else
typedef char4 qjones;  // (pol 0 re, im, pol 1 re, im)
#define QMAX 127
#endif

// Both parts of v rounded to nearest (ties to even) and clamped to +-QMAX; adds 1 to `clamped`
// if either had to be; NaN gives 0, not counted (docs/signal-path.md). The clamp comes first, in
// float with NaN kept (two instructions instead of integer compares and selects after the
// conversion), and one compare of the larger magnitude counts it: for finite v the integer is
// the same as rounding then clamping, since a part in (QMAX, QMAX + 1/2) rounds to QMAX either
// way, and a part was clamped exactly when its magnitude is at least QMAX + 1/2 (QMAX is odd,
// so the tie rounds to QMAX + 1).
__device__ __forceinline__ float clamp_keeping_nan(float v) {
#if __CUDA_ARCH__ >= 800
    float r;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(v), "f"((float)QMAX));
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(r), "f"((float)-QMAX));
    return r;
#else
    return v != v ? v : fminf(fmaxf(v, (float)-QMAX), (float)QMAX);
#endif
}
__device__ __forceinline__ char2 quantise(float2 v, u32 &clamped) {
    clamped += fmaxf(fabsf(v.x), fabsf(v.y)) >= QMAX + 0.5f; // fmaxf: a NaN part is passed over
    return make_char2((signed char)__float2int_rn(clamp_keeping_nan(v.x)), // cvt.rni: NaN -> 0
                      (signed char)__float2int_rn(clamp_keeping_nan(v.y)));
}

// One polarisation's half of a qjones.
#if OUT_BITS == 4
typedef unsigned char qpol;
__device__ __forceinline__ qpol make_qpol(char2 p) { return (unsigned char)((p.x << 4) | (p.y & 0xf)); }
__device__ __forceinline__ qjones join_pols(qpol p0, qpol p1) { return make_uchar2(p0, p1); }
#else
typedef char2 qpol;
__device__ __forceinline__ qpol make_qpol(char2 p) { return p; }
__device__ __forceinline__ qjones join_pols(qpol p0, qpol p1) { return make_char4(p0.x, p0.y, p1.x, p1.y); }
#endif
__device__ __forceinline__ qjones make_qjones(char2 p0, char2 p1) { return join_pols(make_qpol(p0), make_qpol(p1)); }

// The output dither (engine/src/signal/dither.rs, which the host and the float64 reference use):
// lowbias32 of the spectrum's key and the element's counter; the high 16 bits dither the real
// part, the low 16 the imaginary, u -> (2u + 1 - 65536) / 131072, exact in float32.
__device__ __forceinline__ u32 lowbias32(u32 x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    return x ^ (x >> 16);
}
__device__ __forceinline__ float2 dither(u32 key, u32 channel, u32 pol) {
    const u32 h = lowbias32(key ^ ((2u * channel + pol) * 0x9E3779B9u));
    return make_float2((float)(int)(2u * (h >> 16) + 1u - 65536u) * (1.0f / 131072.0f),
                       (float)(int)(2u * (h & 0xffffu) + 1u - 65536u) * (1.0f / 131072.0f));
}

// The channel of output slot `slot` of the block whose first pair is `t0`; -1 if none.
__device__ __forceinline__ int slot_channel(u32 t0, u32 slot) {
    const u32 t = t0 + (slot % PP_TILE);
    if (t >= PAIRS) return -1;
    const u32 side = (slot / PP_TILE) & 1;
    const u32 k2 = slot / (2 * PP_TILE);
    const u32 k1 = side == 0 ? t : (t == 0 ? FFT_LEN / 2 : FFT_LEN - t);
    return (int)(k1 + FFT_LEN * k2);
}

// exp(i x) for |x| <= pi/4: Taylor series to x^10, error under 2e-9 (below float rounding).
__device__ __forceinline__ float2 expi_small(float x) {
    const float x2 = x * x;
    const float s = fmaf(x * x2, fmaf(x2, fmaf(x2, fmaf(x2, 2.7557319e-6f, -1.9841270e-4f), 8.3333333e-3f), -0.16666667f), x);
    const float c = fmaf(x2, fmaf(x2, fmaf(x2, fmaf(x2, fmaf(x2, -2.7557319e-7f, 2.4801587e-5f), -1.3888889e-3f), 4.1666667e-2f), -0.5f), 1.0f);
    return make_float2(c, s);
}

// exp(-i pi k r / n), exact enough for any r; the polynomial when |r| <= 1 (|angle| <= pi/4).
__device__ __forceinline__ float2 fine_rotation(float k_over_n, float r, bool small) {
    if (small) return expi_small(-3.14159265f * (k_over_n * r));
    return expipi(-k_over_n * r);
}

extern "C" __global__ void __launch_bounds__(PP_TILE * PP_ROWS) postproc(
    const float2 *__restrict__ fft,        // [pol][spectra][UNZIP][FFT_LEN]
    const float2 *__restrict__ twiddles,   // [CHANNELS]: exp(-i pi k/n); then [3][FFT_LEN]: W_n^{j k1}, j = 1..3
    const float2 *__restrict__ gains,      // [pol][CHANNELS]: half the complex gain
    const float4 *__restrict__ rotation,   // [pol][spectra]: (fine delay r in samples, dither key bits, cos p, sin p)
    qjones *__restrict__ out,              // [heap][CHANNELS][SPECTRA_PER_HEAP]
    u64 *__restrict__ saturated,           // [pol], accumulated
    u32 spectra)
{
    __shared__ qjones tile[PP_SLOTS][PP_TILE + 1]; // +1: conflict-free column writes
    __shared__ u32 sat_block[2];

    const u32 tx = threadIdx.x, ty = threadIdx.y;
    const u32 t0 = blockIdx.x * PP_TILE;
    const u32 t = t0 + tx;
    const u32 mt = blockIdx.y * PP_TILE; // first spectrum of the tile
    if (tx < 2 && ty == 0) sat_block[tx] = 0;
    __syncthreads();

    u32 sat[2] = {0, 0};
    if (t < PAIRS) {
        const u32 ka = t;
        const u32 kb = t == 0 ? FFT_LEN / 2 : FFT_LEN - t;
        // Twiddles W_n^{j k1} = exp(-2 pi i j k1 / n), j = 1..3, and the fix-up twiddles
        // exp(-i pi k / n) of the 8 channels.
        float2 twa[3], twb[3], fxa[4], fxb[4];
#pragma unroll
        for (int j = 0; j < 3; j++) {
            twa[j] = __ldg(twiddles + CHANNELS + j * FFT_LEN + ka);
            twb[j] = __ldg(twiddles + CHANNELS + j * FFT_LEN + kb);
        }
#pragma unroll
        for (int k2 = 0; k2 < 4; k2++) {
            fxa[k2] = __ldg(twiddles + ka + FFT_LEN * k2);
            fxb[k2] = __ldg(twiddles + kb + FFT_LEN * k2);
        }
        const float ka_n = (float)ka / (float)CHANNELS, kb_n = (float)kb / (float)CHANNELS;

#pragma unroll 1
        for (u32 s = ty; s < PP_TILE; s += PP_ROWS) {
            const u32 m = mt + s;
            if (m >= spectra) break;
            char2 qa[2][4], qb[2][4];
#pragma unroll
            for (int pol = 0; pol < 2; pol++) {
                const float2 *src = fft + ((u64)pol * spectra + m) * (UNZIP * FFT_LEN);
                float2 a[4], b[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    a[j] = src[j * FFT_LEN + ka];
                    b[j] = src[j * FFT_LEN + kb];
                }
#pragma unroll
                for (int j = 1; j < 4; j++) {
                    a[j] = cmul(a[j], twa[j - 1]);
                    b[j] = cmul(b[j], twb[j - 1]);
                }
                // 4-point FFTs: Z[k2] = sum_j a[j] (-i)^{j k2}.
                float2 za[4], zb[4];
                {
                    float2 s02 = cadd(a[0], a[2]), d02 = csub(a[0], a[2]);
                    float2 s13 = cadd(a[1], a[3]), d13 = cmul_mi(csub(a[1], a[3]));
                    za[0] = cadd(s02, s13); za[2] = csub(s02, s13);
                    za[1] = cadd(d02, d13); za[3] = csub(d02, d13);
                }
                {
                    float2 s02 = cadd(b[0], b[2]), d02 = csub(b[0], b[2]);
                    float2 s13 = cadd(b[1], b[3]), d13 = cmul_mi(csub(b[1], b[3]));
                    zb[0] = cadd(s02, s13); zb[2] = csub(s02, s13);
                    zb[1] = cadd(d02, d13); zb[3] = csub(d02, d13);
                }
                // Fine delay and fringe phase: exp(i (p - pi k r / n)) with k = k1 + A k2
                // = exp(i p) exp(-i pi k1 r / n) exp(-i pi k2 r / 4).
                const float4 rot = __ldg(rotation + (u64)pol * spectra + m);
                const bool small = fabsf(rot.x) <= 1.0f; // the same for the whole block
                const float2 ph = make_float2(rot.z, rot.w);
                const float2 step = fine_rotation(0.25f, rot.x, small);
                float2 ra = cmul(ph, fine_rotation(ka_n, rot.x, small));
                float2 rb = cmul(ph, fine_rotation(kb_n, rot.x, small));
                const float2 *g = gains + pol * CHANNELS;
#pragma unroll
                for (int k2 = 0; k2 < 4; k2++) {
                    // Partners Z_{n-k}: see the header comment; thread 0 pairs each side with itself.
                    const float2 pa = t == 0 ? za[(4 - k2) & 3] : zb[3 - k2];
                    const float2 pb = t == 0 ? zb[3 - k2] : za[3 - k2];
                    // X = (E - i fx D) / 2 with E = Z + conj P, D = Z - conj P; the 1/2 is in the gain.
                    float2 xa = csub(cadd(za[k2], cconj(pa)), cmul(fxa[k2], make_float2(-(za[k2].y + pa.y), za[k2].x - pa.x)));
                    float2 xb = csub(cadd(zb[k2], cconj(pb)), cmul(fxb[k2], make_float2(-(zb[k2].y + pb.y), zb[k2].x - pb.x)));
                    const float2 ga = __ldg(g + ka + FFT_LEN * k2);
                    const float2 gb = __ldg(g + kb + FFT_LEN * k2);
                    xa = cmul(xa, cmul(ra, ga));
                    xb = cmul(xb, cmul(rb, gb));
#if DITHER
                    const u32 key = __float_as_uint(rot.y);
                    xa = cadd(xa, dither(key, ka + FFT_LEN * k2, pol));
                    xb = cadd(xb, dither(key, kb + FFT_LEN * k2, pol));
#endif
                    qa[pol][k2] = quantise(xa, sat[pol]);
                    qb[pol][k2] = quantise(xb, sat[pol]);
                    ra = cmul(ra, step);
                    rb = cmul(rb, step);
                }
            }
#pragma unroll
            for (int k2 = 0; k2 < 4; k2++) {
                tile[k2 * 2 * PP_TILE + tx][s] = make_qjones(qa[0][k2], qa[1][k2]);
                tile[k2 * 2 * PP_TILE + PP_TILE + tx][s] = make_qjones(qb[0][k2], qb[1][k2]);
            }
        }
    }
    // Thread 0 of the grid handles the self-paired columns: its two sides are distinct channels,
    // so nothing is counted twice.
    if (sat[0]) atomicAdd(&sat_block[0], sat[0]);
    if (sat[1]) atomicAdd(&sat_block[1], sat[1]);
    __syncthreads();

    // Write out: each warp one channel at a time, one lane per spectrum.
    const u32 m = mt + tx;
    if (m < spectra) {
        const u32 heap = m / SPECTRA_PER_HEAP;
        const u32 sh = m % SPECTRA_PER_HEAP;
        qjones *dst = out + (u64)heap * CHANNELS * SPECTRA_PER_HEAP + sh;
        for (u32 slot = ty; slot < PP_SLOTS; slot += PP_ROWS) {
            const int k = slot_channel(t0, slot);
            if (k >= 0) dst[(u64)k * SPECTRA_PER_HEAP] = tile[slot][tx];
        }
    }
    if (tx < 2 && ty == 0 && sat_block[tx]) atomicAdd(saturated + tx, (u64)sat_block[tx]);
}
