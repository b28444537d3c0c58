// The DDC of every narrowband output of a frame in one launch, on the tensor cores (engine
// docs/signal-path.md, Narrowband). Appended after common.cuh.
//
// Extra configuration:
//   DDC_SET_N      the outputs
//   DDC_SET_CASES  one `case k: ddc_block<D, W, k, k2>(...)` per output or pair of outputs of one
//                  decimation D and taps per phase W = ceil(L / D) (k2 -1 for none; `case k2`
//                  then does nothing). D is the DDC's own decimation, its subsampling: a
//                  no-discard output's is twice the output's decimation.
//   DDC_MMA_WARPS  warps per block
//   DDC_SET_SPAN   input samples per block: 8192 or 16384
//
// Output k's filter y[j] = sum_i x[jD + i] z_i (L = W D taps, the mixer folded into the complex
// taps z on the host; the rotation by the absolute phase follows) is a GEMM: outputs go in rows
// of P = 4, row a (outputs j = jb + 4a + b, b < 4) reads the samples from (jb + 4a) D, so that
// Y[a][b] = sum_i x[(jb + 4a) D + i] G[i][b] with G[i][b] = z_{i - bD} (zero outside 0..WD): depth
// (P - 1 + W) D rounded up to 16, width 2P = 8 (real and imaginary parts), the shape of
// mma.m16n8k16. The samples (at most 12 bits) are exact in float16; G comes from the host as
// float16 pairs scaled by a power of two (`scale` undoes it), hi + lo (the rest, rounded again):
// two products with each sample carry 22 bits of each tap, accumulated in float32, as accurate as
// the FMA kernel `ddc`. P W / (P - 1 + W) of the GEMM's products are taps (80% for W = 12).
//
// A block covers one stretch of MMA_SPAN input samples (MMA_SPAN / D outputs of each output) and
// makes every output's part of it in turn, so the input is read from device memory once for all the
// outputs. The kernel is bound by shared-memory and L1 wavefronts: the block loads the stretch's
// packed words once with coalesced loads into shared memory; each output then unpacks them, 16
// samples a thread (whole words, so a warp's reads fall in distinct banks for 10-bit samples),
// into float16, each row start padded by 8 halves every 4D samples so that the 32 lanes'
// A-fragment loads (rows 4D apart, 2 samples per lane) fall in 32 banks.
//
// More configuration: DDC_SET_RAW, the packed words a block stages (the largest output's).

#define MMA_P 4
#define MMA_SPAN DDC_SET_SPAN // input samples per block
#define RAW16 (SAMPLE_BITS / 2) // words of 16 samples

struct DdcOut {
    const uint4 *taps; // [k-step][lane]: G (hi rows 2t.., hi rows 2t+8.., lo, lo), column g
    float2 *out;       // [pol][samples]
    u32 samples;       // subsampled samples per polarisation
    u32 first, end;    // make [first, end) only
    u32 phase0;        // mixer phase of the span's first sample (2^-32 turns)
    u32 phase_step;    // mixer phase over D samples
    float scale;       // 1 / the taps' scale
};

struct DdcSet {
    DdcOut o[DDC_SET_N];
};

__device__ __forceinline__ u32 half2_bits(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ void mma_f16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared memory one block of decimation D and W taps per phase needs, in 32-bit words.
template <int D, int W> struct MmaShape {
    static constexpr int K16 = ((MMA_P - 1 + W) * D + 15) / 16;   // k-steps of 16
    static constexpr int OUT = MMA_SPAN / D;                      // outputs per block
    static constexpr int TILES = OUT / (DDC_MMA_WARPS * 16 * MMA_P); // 16-row tiles per warp
    static constexpr int SAMPLES = (OUT - MMA_P) * D + 16 * K16;  // samples per block
    static constexpr int ROW = 4 * D + 8;                         // padded halves per row start
    __host__ __device__ static constexpr int idx(int s) { return s + 8 * (s / (4 * D)); } // padded half index
    static constexpr int WORDS = (idx(SAMPLES) + 8) / 2;
};

// 16 samples from RAW16 words (byte-swapped, most significant bit first).
__device__ __forceinline__ void unpack16(const u32 *w, float (&v)[16]) {
    u32 a[RAW16 + 1];
#pragma unroll
    for (int i = 0; i < RAW16; i++) a[i] = w[i];
    a[RAW16] = 0;
    unpack_words(a, v);
}

// Whether output p has anything to make in the block's outputs [jb, jb + n).
__device__ __forceinline__ bool makes(const DdcOut &p, u32 jb, u32 n) {
    return jb < p.end && jb + n > p.first;
}

// Outputs K0 and, where K1 >= 0, K1 (both of decimation D and W taps per phase: the same rows)
// from the block's stretch. A pair shares the unpacked samples and every A fragment, which are
// what the kernel is bound by; only the taps differ.
template <int D, int W, int K0, int K1>
__device__ __forceinline__ void ddc_block(const u32 *raw, u32 *xs, u32 stretch, u32 pol, const DdcSet &set) {
    typedef MmaShape<D, W> S;
    constexpr int N = K1 < 0 ? 1 : 2;
    const DdcOut &p0 = set.o[K0], &p1 = set.o[K1 < 0 ? K0 : K1];
    const u32 jb = stretch * S::OUT;
    if (!makes(p0, jb, S::OUT) && (N == 1 || !makes(p1, jb, S::OUT))) return;
    __syncthreads(); // the last output's samples are read
    for (u32 e = threadIdx.x; e < S::SAMPLES / 16; e += DDC_MMA_WARPS * 32) {
        float v[16];
        unpack16(raw + e * RAW16, v);
        // A group of 16 never straddles a row start (4D is a multiple of 16).
        uint4 *d = reinterpret_cast<uint4 *>(xs + S::idx(16 * e) / 2);
        d[0] = make_uint4(half2_bits(v[0], v[1]), half2_bits(v[2], v[3]), half2_bits(v[4], v[5]), half2_bits(v[6], v[7]));
        d[1] = make_uint4(half2_bits(v[8], v[9]), half2_bits(v[10], v[11]), half2_bits(v[12], v[13]), half2_bits(v[14], v[15]));
    }
    __syncthreads();

    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const u32 row0 = warp * S::TILES * 16; // the warp's first row
    const u32 *xa = xs + ((row0 + g) * S::ROW) / 2 + t;
    float acc[N][S::TILES][4];
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int i = 0; i < S::TILES; i++) acc[n][i][0] = acc[n][i][1] = acc[n][i][2] = acc[n][i][3] = 0.0f;
#pragma unroll 2
    for (u32 kk = 0; kk < S::K16; kk++) {
        uint4 b[N];
#pragma unroll
        for (int n = 0; n < N; n++) b[n] = __ldg((n ? p1 : p0).taps + kk * 32 + lane);
        // Column 16kk in padded halves (16 columns never straddle a row start), in words.
        const u32 col = 8 * kk + 4 * ((16 * kk) / (4 * D));
#pragma unroll
        for (int i = 0; i < S::TILES; i++) {
            const u32 *q = xa + i * 8 * S::ROW + col; // 16 rows of ROW halves
            const u32 a[4] = {q[0], q[4 * S::ROW], q[4], q[4 * S::ROW + 4]};
#pragma unroll
            for (int n = 0; n < N; n++) {
                mma_f16(acc[n][i], a, b[n].z, b[n].w); // the small parts first
                mma_f16(acc[n][i], a, b[n].x, b[n].y);
            }
        }
    }
    // Lane (g, t) holds outputs 4 row + t of rows g and g + 8: 32 consecutive outputs per warp.
#pragma unroll
    for (int n = 0; n < N; n++) {
        const DdcOut &o = n ? p1 : p0;
#pragma unroll
        for (int i = 0; i < S::TILES; i++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const u32 j = jb + 4 * (row0 + i * 16 + g + 8 * h) + t;
                if (j >= o.first && j < o.end) {
                    const u32 ph = o.phase0 + j * o.phase_step;
                    const float angle = (float)(int)ph * -1.4629180792671596e-9f; // -2 pi 2^-32
                    float sn, cs;
                    __sincosf(angle, &sn, &cs);
                    const float2 y = make_float2(acc[n][i][2 * h] * o.scale, acc[n][i][2 * h + 1] * o.scale);
                    o.out[(u64)pol * o.samples + j] = cmul(y, make_float2(cs, sn));
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(DDC_MMA_WARPS * 32) ddc_set(
    const u32 *__restrict__ span, // [pol][stride] packed samples
    u64 stride,                   // words from one polarisation's row to the next
    u64 span_words,               // words of the span (where the reads stop)
    u32 stretch0,                 // the first stretch of MMA_SPAN samples made
    DdcSet set)
{
    // DDC_SET_RAW packed words (rounded up to 16 bytes), then the largest output's MmaShape::WORDS.
    extern __shared__ __align__(16) u32 smem[];
    u32 *raw = smem, *xs = smem + (DDC_SET_RAW + 3) / 4 * 4;
    const u32 stretch = stretch0 + blockIdx.x, pol = blockIdx.y;
    span += pol * stride;
    // The stretch starts on a word (8192 or 16384 samples of 8, 10 or 12 bits). Words past the
    // span read as zeros: they feed only outputs not stored.
    const u64 w0 = (u64)stretch * MMA_SPAN * SAMPLE_BITS / 32;
    for (u32 i = threadIdx.x; i < DDC_SET_RAW; i += DDC_MMA_WARPS * 32)
        raw[i] = w0 + i < span_words ? bswap32(__ldg(span + w0 + i)) : 0u;
    __syncthreads();
#pragma unroll
    for (u32 k = 0; k < DDC_SET_N; k++) {
        switch (k) {
            DDC_SET_CASES
        }
    }
}
