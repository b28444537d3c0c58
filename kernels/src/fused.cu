// The wideband output in two passes through device memory instead of three: the FFT is
// our own, split between the two kernels so that neither needs cuFFT.
//
// The n-point complex FFT of z (z_u = g_2u + i g_2u+1, n = CHANNELS) is taken as R x A
// (F_R x F_A, n = R A, R = 16, 32 or 64): with u = i + A j (i < A, j < R) and k = R k1 + k2,
//   Z[R k1 + k2] = sum_i W_A^{i k1} W_n^{i k2} V_i[k2],   V_i[k2] = sum_j z_{i + A j} W_R^{j k2}.
// - `fused_fir` (pass 1): the PFB FIR of columns i + A j for F_C consecutive i and every j, then
//   the R-point FFTs V_i and the twiddles W_n^{i k2}: row k2 of the spectrum's R x A matrix.
// - `fused_post` (pass 2): the A-point FFTs of row k2 and of its partner row (the real-FFT fix-up
//   pairs Z_k with Z_{n-k}, which lies in row (R - k2) mod R), then what `postproc` does: fix-up,
//   fine delay, fringe phase, gain, dither, quantisation, and the transpose to heap layout.
//
// The FFTs are Stockham stages (autosort) with every thread holding 16 points: the stage of radix
// P after L points reads a_q = x[g + q N/P] (butterfly g < N/P), multiplies by W_{PL}^{q (g mod L)},
// and writes its P-point DFT to (g div L) P L + (g mod L) + q L. The first stage (radix 16, L = 1)
// reads straight from where the data is; the later ones go through shared memory, padded by one
// value in 16 so that the first stage's stride-16 writes fall in distinct banks. Twiddles come
// from W_n^t, a table computed in float64.
//
// The rows between the passes are complex float32, or with ROW_HALF complex float16 (4 bytes a
// value instead of 8, `--fft-precision half`), rounded stochastically (make_row): pass 1 scales
// them by a power of two (`row_scale`, folded into its twiddles) so that no value can leave
// float16's range, pass 2 undoes it in its gains, and all arithmetic stays float32.
//
// Configuration (prepended by kernels::source): F_R, F_A, F_C (pass 1 takes F_C columns of each
// of the R column groups: F_R * F_C threads), F_SB (spectra a pass-2 block transforms at once:
// 1024 / A, or 1 where A = 2048), F_M (spectra per pass-2 block, a multiple of F_SB),
// F2_THREADS (256, or 512 where A = 2048), ROW_HALF, FIR_WORD_STEPS, FIR_AHEAD (pass 1: how
// many of a sliding batch's 16 new sample pairs are loaded while the batch before is transformed;
// 0: none, and zs one buffer), POST_PREFETCH (pass 2: how many steps ahead a block has its rows
// prefetched into L2; 0: none), POST_ROW_SYNC (pass 2: each transform's stages wait on its own
// threads alone; see RowSync), POST_GATHER and POST_AHEAD (pass 2: how many of a row's channels
// have their operands read from shared memory together, and whether the next ones' are read
// before these are worked on), POST_EARLY (pass 2: how many of a step's 16 row loads a thread
// issues during the step before, ahead of that step's post-processing).

#if FIR_BATCH != 16
#error "fused_fir's R-point FFTs take 16 points a thread: FIR_BATCH must be 16"
#endif
#if F_R != 16 && F_R != 32 && F_R != 64
#error "fused_fir takes R = 16, 32 or 64"
#endif

#if ROW_HALF
// A complex float16, real part in the low half, rounded stochastically: 13 random bits (the ones
// float32 has below float16's last mantissa bit) are added to the float32's bits, which are then
// truncated toward zero. Rounding up happens with the probability of the dropped fraction, so
// the error has mean zero whatever the signal: no spurs (round to nearest gives -96 dB on a
// dithered tone; kernels/HISTORY.md, "Float16 rows"). The bits come from lowbias32 of the frame's
// key and the value's counter, as engine/src/signal/half_rows.rs models them. NVRTC here has no headers:
// the conversions are PTX.
typedef u32 row_t;
__device__ __forceinline__ row_t make_row(float2 v, u32 key, u32 m, u32 pol, u32 u) {
    const u32 h = lowbias32(key ^ (((m * 2u + pol) * CHANNELS + u) * 0x9E3779B9u));
    const float re = __uint_as_float(__float_as_uint(v.x) + (h & 0x1fffu));
    const float im = __uint_as_float(__float_as_uint(v.y) + ((h >> 16) & 0x1fffu));
    u32 r;
    asm("cvt.rz.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(im), "f"(re));
    return r;
}
__device__ __forceinline__ float2 from_row(row_t r) {
    float2 v;
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.f32.f16 %0, lo;\ncvt.f32.f16 %1, hi;\n}"
        : "=f"(v.x), "=f"(v.y) : "r"(r));
    return v;
}
#else
typedef float2 row_t;
__device__ __forceinline__ row_t make_row(float2 v, u32, u32, u32, u32) { return v; }
__device__ __forceinline__ float2 from_row(row_t r) { return r; }
#endif

// Loads that stay where the code puts them: before a barrier they need not wait for. (ptxas
// moves a non-coherent load, `__ldg` or through const __restrict__, past the barrier.) Rows
// prefetched into L2 (POST_PREFETCH) are read from there without a place in L1 (`.cg`): each is
// read once.
#if POST_PREFETCH
#define LD_ROW "ld.global.cg"
#else
#define LD_ROW "ld.global"
#endif
// Stores a row value where `live` (a batch's spectra past its end write nothing), predicated
// rather than branched around: loads after it (the next twiddles) may then be issued before it.
__device__ __forceinline__ void store_row_if(bool live, row_t *p, row_t v) {
#if ROW_HALF
    asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %2, 0;\n@p st.global.u32 [%0], %1;\n}" : : "l"(p), "r"(v), "r"((u32)live));
#else
    asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %3, 0;\n@p st.global.v2.f32 [%0], {%1, %2};\n}" : : "l"(p), "f"(v.x), "f"(v.y), "r"((u32)live));
#endif
}
__device__ __forceinline__ row_t load_row_here(const row_t *p) {
    row_t r;
#if ROW_HALF
    asm volatile(LD_ROW ".u32 %0, [%1];" : "=r"(r) : "l"(p));
#else
    asm volatile(LD_ROW ".v2.f32 {%0, %1}, [%2];" : "=f"(r.x), "=f"(r.y) : "l"(p));
#endif
    return r;
}
__device__ __forceinline__ u32 load_word_here(const u32 *p) {
    u32 r;
    asm volatile("ld.global.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}
// A word of the span: `here` as above, else non-coherent (measured faster where it may move).
__device__ __forceinline__ u32 load_word(const u32 *p, bool here) { return here ? load_word_here(p) : __ldg(p); }
__device__ __forceinline__ float4 load_here(const float4 *p) {
    float4 r;
    asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
    return r;
}

#define F1_THREADS (F_R * F_C)
#define F_H (F_R / 16) // pass-1 threads per R-point FFT
#define SPECTRUM_WORDS (STEP * SAMPLE_BITS / 32) // packed words a spectrum (2n samples) spans
// FIR_WORD_STEPS (kernels::Config::fused_fir_word_steps): how a sliding batch finds its 16 new
// sample pairs: at constant word steps from the first (one offset load, one address, 32 loads
// back to back: 12% fewer instructions), or each from its own offset. Word steps only at R = 16:
// at R = 32 and 64 the burst throttles the load/store queue, which the shuffles and the row
// stores share (ncu: 0.92 cycles an instruction stalled on it at R = 64), and per-offset loads
// measured 2.5-5.5% faster (kernels/HISTORY.md, "Version 12").

// W_16^j, exact constants (j < 16).
__device__ __forceinline__ float2 w16(int j) {
    const float c1 = 0.92387953251128674f, c2 = 0.70710678118654752f, c3 = 0.38268343236508978f;
    const float cs[16] = {1.0f, c1, c2, c3, 0.0f, -c3, -c2, -c1, -1.0f, -c1, -c2, -c3, 0.0f, c3, c2, c1};
    const float sn[16] = {0.0f, c3, c2, c1, 1.0f, c1, c2, c3, 0.0f, -c3, -c2, -c1, -1.0f, -c1, -c2, -c3};
    return make_float2(cs[j & 15], -sn[j & 15]);
}

// The forward DFT of 4 points in place, natural order (W_4 = -i).
__device__ __forceinline__ void dft4(float2 &a0, float2 &a1, float2 &a2, float2 &a3) {
    const float2 s02 = cadd(a0, a2), d02 = csub(a0, a2);
    const float2 s13 = cadd(a1, a3), d13 = cmul_mi(csub(a1, a3));
    a0 = cadd(s02, s13);
    a2 = csub(s02, s13);
    a1 = cadd(d02, d13);
    a3 = csub(d02, d13);
}

// The forward DFT of P = 2, 4, 8 or 16 points in registers, in place, natural order. P = 8 and 16
// are 2 x 4 and 4 x 4: X[s + 4t] = sum_r W_P^{r s} W_{P/4}^{r t} (sum_u a[r + (P/4) u] W_4^{u s}).
template <int P>
__device__ __forceinline__ void dft(float2 (&a)[P]) {
    if constexpr (P == 2) {
        const float2 t = a[0];
        a[0] = cadd(t, a[1]);
        a[1] = csub(t, a[1]);
    } else if constexpr (P == 4) {
        dft4(a[0], a[1], a[2], a[3]);
    } else {
        constexpr int Q = P / 4; // 2 or 4
        float2 b[Q][4];
#pragma unroll
        for (int r = 0; r < Q; r++) {
#pragma unroll
            for (int u = 0; u < 4; u++) b[r][u] = a[r + Q * u];
            dft4(b[r][0], b[r][1], b[r][2], b[r][3]);
#pragma unroll
            for (int s = 1; s < 4; s++) {
                // W_16^4 = -i is a swap: the same bytes as the multiply (by 0 and -1, exact).
                if (r * s * (16 / P) == 4) b[r][s] = cmul_mi(b[r][s]);
                else if (r > 0) b[r][s] = cmul(b[r][s], w16(r * s * (16 / P)));
            }
        }
#pragma unroll
        for (int s = 0; s < 4; s++) {
            float2 c[Q];
#pragma unroll
            for (int r = 0; r < Q; r++) c[r] = b[r][s];
            if constexpr (Q == 2) {
                a[s] = cadd(c[0], c[1]);
                a[s + 4] = csub(c[0], c[1]);
            } else {
                dft4(c[0], c[1], c[2], c[3]);
#pragma unroll
                for (int t = 0; t < 4; t++) a[s + 4 * t] = c[t];
            }
        }
    }
}

// A radix-2 butterfly across a pair of lanes `lanes` apart, each holding one value of each of
// two butterflies (`lo` for the lower thread's, `hi` for the upper's): this thread keeps its own
// butterfly's value, gives the partner the other by shuffle, and gets its inputs in order in `a`.
__device__ __forceinline__ void pair_inputs(float2 lo, float2 hi, bool upper, int lanes, float2 (&a)[2]) {
    const float2 mine = upper ? hi : lo, give = upper ? lo : hi;
    const float2 got = make_float2(__shfl_xor_sync(0xffffffffu, give.x, lanes),
                                   __shfl_xor_sync(0xffffffffu, give.y, lanes));
    a[0] = upper ? got : mine;
    a[1] = upper ? mine : got;
}

// Shared-memory index of point p: one value of padding per 16.
__device__ __forceinline__ int pad16(int p) { return p + (p >> 4); }

__host__ __device__ constexpr int radix_after(int n, int l) { return n / l < 16 ? n / l : 16; }
// Twiddle entries of the stages from L on: P L each, laid out [q][k].
__host__ __device__ constexpr int twiddles_from(int n, int l) {
    return l >= n ? 0 : radix_after(n, l) * l + twiddles_from(n, l * radix_after(n, l));
}

// Fills tw (from OFF on) with the twiddles W_{PL}^{q k} of the stages from L on, [q][k] per stage.
template <int N, int L, int OFF, int THREADS>
__device__ __forceinline__ void fill_twiddles(float2 *tw, const float2 *__restrict__ wn) {
    if constexpr (L < N) {
        constexpr int P = radix_after(N, L);
        for (int e = threadIdx.x; e < P * L; e += THREADS) {
            const int q = e / L, k = e % L;
            tw[OFF + e] = __ldg(wn + q * k * (CHANNELS / (P * L)));
        }
        fill_twiddles<N, L * P, OFF + P * L, THREADS>(tw, wn);
    }
}

// The stages from L on (L >= 16) of NT transforms of N points in shared memory (transform t at
// x + t * pad16(N)); thread `h` of its transform's N / 16 does 16 / P butterflies a stage.
// `sync` is the barrier of the threads that share the transforms, `last` the one that ends the
// last stage (where more threads than these read the result). Starts with the data written and
// synchronised; ends the same way, in natural order.
template <int N, int L, int OFF, typename Sync, typename Last>
__device__ __forceinline__ void later_stages(float2 *x, int h, const float2 *tw, Sync sync, Last last) {
    if constexpr (L < N) {
        constexpr int P = radix_after(N, L), B = 16 / P, TH = N / 16;
        constexpr bool is_last = L * P >= N;
        float2 v[B][P];
        // N / P and L are multiples of 16 here, so pad16(a + q M) = pad16(a) + q M 17/16: the
        // padding costs one index computation a butterfly, not one a value.
#pragma unroll
        for (int bb = 0; bb < B; bb++) {
            const int g = h + TH * bb, k = g % L;
            const float2 *in = x + pad16(g);
#pragma unroll
            for (int q = 0; q < P; q++) v[bb][q] = in[q * (N / P) / 16 * 17];
#pragma unroll
            for (int q = 1; q < P; q++) v[bb][q] = cmul(v[bb][q], tw[OFF + q * L + k]);
            dft<P>(v[bb]);
        }
        sync();
#pragma unroll
        for (int bb = 0; bb < B; bb++) {
            const int g = h + TH * bb, k = g % L;
            float2 *o = x + pad16((g - k) * P + k);
#pragma unroll
            for (int q = 0; q < P; q++) o[q * L / 16 * 17] = v[bb][q];
        }
        if constexpr (is_last) last();
        else sync();
        later_stages<N, L * P, OFF + P * L>(x, h, tw, sync, last);
    }
}

// Pass 1. For the FIR, thread (c, j) = (tid mod F_C, tid div F_C) owns column u = i0 + c + A j,
// keeps its 2T weights and a window of T sample pairs in registers as `pfb_fir` does, and slides
// it through the block's spectra. Per batch of 16 spectra the block's values go to shared memory
// as [b][j][c]: transform (b, c) has its R points at stride F_C. Each transform is then F_H
// threads (c fastest, so that shared-memory accesses are consecutive): a radix-16 stage, and for
// R > 16 one more of radix F_H = 2 or 4 across those threads, lanes of one warp, by shuffles.

// Whether spectra m..m + FIR_BATCH (all below m1) each start one spectrum after the one before
// (`first_batch`: spectrum m starts where the window was loaded for). A barrier for the block.
__device__ __forceinline__ bool batch_slides(const u32 *__restrict__ offsets, u32 m, u32 m1, bool first_batch) {
    const u32 b = threadIdx.x;
    bool ok = m + FIR_BATCH <= m1;
    if (ok && b < FIR_BATCH && (b > 0 || !first_batch))
        ok = __ldg(offsets + m + b) == __ldg(offsets + m + b - 1) + STEP;
    return __syncthreads_and(ok);
}

// A batch whose spectra do not all slide (a delay changes within it, or the block's spectra end
// there): spectrum by spectrum as pfb_fir does, the window reloaded where the delay changes, zeros
// past the end.
__device__ __forceinline__ void fir_unslid(const u32 *__restrict__ span, const u32 *__restrict__ offsets, u32 m, u32 nb, u32 u,
                                           u32 &prev, float2 (&x)[TAPS], const float2 (&w)[TAPS], float2 *z) {
    for (u32 b = 0; b < FIR_BATCH; b++) {
        if (b >= nb) {
            z[b * F_R * F_C] = make_float2(0.0f, 0.0f);
            continue;
        }
        const u32 off = __ldg(offsets + m + b);
        window_at(span, off, u, prev, x);
        prev = off;
        z[b * F_R * F_C] = fir_sum(x, w);
    }
}

#if FIR_TMA
// FIR_TMA: a sliding batch's sample words come into shared memory by one bulk tensor copy (TMA)
// a block, issued by one thread a batch ahead, instead of 32 loads a thread. The map (one a
// polarisation, made by the host for each launch) sees the span as words x column groups x
// spectra, at strides of 1, 2A bits / 32 and 2n bits / 32 words, with an innermost extent past
// its next stride (a group's words may run past the stride: engine/examples/tma_probe.rs). A box
// starts on 16 bytes, so it takes FIR_TMA_WORDS words of each (spectrum, group), the block's 8
// columns at most 3 words in.
struct __align__(64) TensorMap { u64 v[16]; };
struct SpanMaps {
    TensorMap pol[2];
    u32 lead; // words from each map's (16-byte aligned) start to the span's first
};
#define TMA_BOX (FIR_BATCH * F_R * FIR_TMA_WORDS) // words of a box
#if FIR_AHEAD || (31 + 2 * SAMPLE_BITS * (F_C - 1)) / 32 + 1 + 3 >= FIR_TMA_WORDS
#error "fused_fir's tensor copies take batches with no pairs ahead, and a box row must hold a group's columns from 3 words in"
#endif
__device__ __forceinline__ u32 smem_addr(const void *p) { return (u32)__cvta_generic_to_shared(p); }
// Thread 0: the box of the batch whose newest pairs start at span word `word` (of column i0,
// group 0, its first spectrum) into `box`, completing on `bar`.
__device__ __forceinline__ void copy_batch(const TensorMap *map, u32 word, u32 *box, u64 *bar) {
    const u32 b = smem_addr(bar);
    asm volatile("fence.proxy.async.shared::cta;" : : : "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" : : "r"(b), "n"(TMA_BOX * 4) : "memory");
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                 : : "r"(smem_addr(box)), "l"(map), "r"(word & ~3u), "r"(0), "r"(0), "r"(b) : "memory");
}
__device__ __forceinline__ void wait_batch(u64 *bar, u32 parity) {
    asm volatile("{\n.reg .pred p;\nWAIT%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT%=;\n}"
                 : : "r"(smem_addr(bar)), "r"(parity) : "memory");
}
#define F1_MAPS , const __grid_constant__ SpanMaps maps
#else
#define F1_MAPS
#endif

// 16 warps an SM: with pairs loaded ahead (held across the transforms) ptxas would take more than
// the 128 registers a thread that allows, unless told.
#if FIR_AHEAD
#define F1_BOUNDS __launch_bounds__(F1_THREADS, 512 / F1_THREADS)
#else
#define F1_BOUNDS __launch_bounds__(F1_THREADS)
#endif
extern "C" __global__ void F1_BOUNDS fused_fir(
    const u32 *__restrict__ span,       // [pol][stride] packed samples
    u64 stride,                         // words from one polarisation's row to the next
    const u32 *__restrict__ offsets,    // [pol][spectra] window start in the span, in samples
    const float2 *__restrict__ weights, // [TAPS][CHANNELS], as pfb_fir's
    const float2 *__restrict__ wn,      // [CHANNELS]: W_n^t
    float row_scale,                    // a power of two (1 unless ROW_HALF)
    u32 row_key,                        // the frame's key for the rows' rounding (ROW_HALF)
    row_t *__restrict__ out,            // [pol][rows_spectra][F_R][F_A]: row k2, column i
    u32 spectra,                        // of the frame (offsets' row length)
    u32 first,                          // this launch's spectra: first..first + count, written
    u32 count,                          // from the rows' spectrum 0 on
    u32 rows_spectra,
    u32 spectra_per_block
    F1_MAPS)                            // FIR_TMA: the span's tensor maps
{
    extern __shared__ __align__(128) float2 zs[]; // [1 or 2][FIR_BATCH][F_R][F_C], FIR_TMA: [2][TMA_BOX] words (kernels::Config::fused_fir_smem)
    __shared__ float2 tw_r[F_R];       // W_R^t
    __shared__ float2 tw_i[F_R * F_C]; // W_n^{i k2} for the block's i: [k2][c]

    const u32 tid = threadIdx.x;
    const u32 i0 = blockIdx.x * F_C;
    const u32 pol = blockIdx.z;
    const u32 m0 = first + blockIdx.y * spectra_per_block;
    if (m0 >= first + count) return;
    const u32 m1 = min(m0 + spectra_per_block, first + count);

    for (u32 t = tid; t < F_R; t += F1_THREADS) tw_r[t] = __ldg(wn + t * F_A);
    // (i0 + c) k2 < A R = n: no reduction needed. The rows' scale rides on these twiddles.
    for (u32 t = tid; t < F_R * F_C; t += F1_THREADS) {
        const float2 w = __ldg(wn + (i0 + t % F_C) * (t / F_C));
        tw_i[t] = make_float2(w.x * row_scale, w.y * row_scale);
    }

    span += pol * stride;
#if !FIR_WORD_STEPS
    // Opaque to the compiler, so that it keeps this pointer rather than rebuild it (a 64-bit
    // multiply-add and two more) for each of a batch's 16 sample loads.
    asm("" : "+l"(span));
#endif
    offsets += (u64)pol * spectra;

    // The FIR's thread: column (c, j).
    const u32 u = i0 + tid % F_C + F_A * (tid / F_C);
    float2 *z = zs + tid; // [b][j][c] with tid = j F_C + c
    // The FFT's thread: transform (b, c), part h.
    const u32 fc = tid % F_C, fh = (tid / F_C) % F_H, fb = tid / (F_C * F_H);
    float2 *col = zs + fb * (F_R * F_C) + fc; // point j at col[j * F_C]

    float2 w[TAPS];
#if !FIR_AHEAD
#pragma unroll
    for (int t = 0; t < TAPS; t++) w[t] = __ldg(weights + t * CHANNELS + u);
#endif

    float2 x[TAPS];
    const u32 off0 = __ldg(offsets + m0);
#pragma unroll
    for (int t = 0; t < TAPS - 1; t++) x[t + 1] = load_pair(span, off0 + 2 * u + STEP * t);
    u32 prev = off0 - STEP; // wraps harmlessly: prev + STEP == off0

#if FIR_AHEAD
    // A batch's new sample pairs are loaded while the batch before is transformed: zs is two
    // buffers, so that one barrier a batch (values written, the slide vote for two batches on)
    // suffices, and the weights are read again for each batch (from L1) so that their registers
    // hold the pairs during the transforms.
    u32 w0[FIR_BATCH], w1[FIR_BATCH], sh = 0;
    // Pairs b0 <= b < b1 of the batch from mb: `here` before a barrier (see load_word_here),
    // else non-coherent (measured faster).
    auto load_batch = [&](u32 mb, int b0, int b1, bool here) {
#if FIR_WORD_STEPS
        const u32 *first_word = sample_word(span, __ldg(offsets + mb) + 2 * u + STEP * (TAPS - 1), sh);
#pragma unroll
        for (int b = b0; b < b1; b++) {
            w0[b] = load_word(first_word + b * SPECTRUM_WORDS, here);
            w1[b] = load_word(first_word + b * SPECTRUM_WORDS + 1, here);
        }
#else
#pragma unroll
        for (int b = b0; b < b1; b++) {
            const u32 *p = sample_word(span, __ldg(offsets + mb + b) + 2 * u + STEP * (TAPS - 1), sh);
            w0[b] = load_word(p, here);
            w1[b] = load_word(p + 1, here);
        }
#endif
    };
    bool slide = batch_slides(offsets, m0, m1, true);
    bool slide_next = batch_slides(offsets, m0 + FIR_BATCH, m1, false);
    if (slide) load_batch(m0, 0, (int)FIR_AHEAD, true);
    for (u32 m = m0, buf = 0; m < m1; m += FIR_BATCH, buf ^= 1) {
        const u32 nb = min((u32)FIR_BATCH, m1 - m);
        float2 *zb = z + buf * (FIR_BATCH * F_R * F_C);
        const float2 *cb = col + buf * (FIR_BATCH * F_R * F_C);
#pragma unroll
        for (int t = 0; t < TAPS; t++) w[t] = __ldg(weights + t * CHANNELS + u);
        if (slide) {
            load_batch(m, (int)FIR_AHEAD, (int)FIR_BATCH, false);
#pragma unroll
            for (int b = 0; b < FIR_BATCH; b++) {
                // Shifted before the pair is unpacked, not by slide_in: that order compiles to the
                // same instructions scheduled otherwise, not the code that was measured.
#pragma unroll
                for (int t = 0; t < TAPS - 1; t++) x[t] = x[t + 1];
                x[TAPS - 1] = pair_of(w0[b], w1[b], sh);
                zb[b * F_R * F_C] = fir_sum(x, w);
            }
            prev += FIR_BATCH * STEP; // the vote: each offset one spectrum past the one before
        } else {
            fir_unslid(span, offsets, m, nb, u, prev, x, w, zb);
        }
        if (slide_next) load_batch(m + FIR_BATCH, 0, (int)FIR_AHEAD, true);
        // The batch's values are in; the other buffer's were read before any thread got here.
        const bool slide_after = batch_slides(offsets, m + 2 * FIR_BATCH, m1, false);
#else
#if FIR_TMA
    u32 *boxes = (u32 *)(zs + FIR_BATCH * F_R * F_C); // [2][TMA_BOX]
    __shared__ __align__(8) u64 bars[2];
    const TensorMap *map = &maps.pol[pol];
    // The word (from the map's start) of the newest pair of column i0, group 0, for a batch from m.
    auto box_word = [&](u32 m) {
        u32 sh;
        return maps.lead + word_of(__ldg(offsets + m) + 2 * i0 + STEP * (TAPS - 1), sh);
    };
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" : : "r"(smem_addr(&bars[0])));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" : : "r"(smem_addr(&bars[1])));
        asm volatile("fence.mbarrier_init.release.cluster;" : : : "memory");
    }
    __syncthreads();
    if (tid == 0) copy_batch(map, box_word(m0), boxes, &bars[0]);
#endif
    for (u32 m = m0, k = 0; m < m1; m += FIR_BATCH, k++) {
        const u32 nb = min((u32)FIR_BATCH, m1 - m);
        const float2 *cb = col;
        // Fast path as in pfb_fir: a whole batch with one delay loads its new pairs together. (The
        // barrier in batch_slides also keeps zs until the batch before is done with it.)
        const bool slide = batch_slides(offsets, m, m1, m == m0);
#if FIR_TMA
        // The next batch's box into the other buffer, read last by the batch before (which every
        // thread finished before the barrier above); then this batch's.
        if (tid == 0 && m + FIR_BATCH < m1) copy_batch(map, box_word(m + FIR_BATCH), boxes + ((k + 1) & 1) * TMA_BOX, &bars[(k + 1) & 1]);
        wait_batch(&bars[k & 1], (k >> 1) & 1);
#endif
        if (slide) {
            float2 fresh[FIR_BATCH];
#if FIR_TMA
            // The batch's offsets step by one spectrum (the vote): a thread's pairs are at one
            // word of its group's row in each spectrum's box.
            const u32 off = __ldg(offsets + m);
            u32 sh, sh0;
            const u32 at = maps.lead + word_of(off + 2 * (i0 + tid % F_C) + STEP * (TAPS - 1), sh);
            const u32 at0 = (maps.lead + word_of(off + 2 * i0 + STEP * (TAPS - 1), sh0)) & ~3u; // the box's first
            const u32 *bw = boxes + (k & 1) * TMA_BOX + (tid / F_C) * FIR_TMA_WORDS + (at - at0);
#pragma unroll
            for (int b = 0; b < FIR_BATCH; b++) fresh[b] = pair_of(bw[b * F_R * FIR_TMA_WORDS], bw[b * F_R * FIR_TMA_WORDS + 1], sh);
#elif FIR_WORD_STEPS
            // The batch's offsets step by one spectrum (the vote), which is a whole number of
            // words: its new pairs share one bit offset, at constant word steps from the first.
            const u32 off = __ldg(offsets + m);
            u32 sh;
            const u32 *first_word = sample_word(span, off + 2 * u + STEP * (TAPS - 1), sh);
#pragma unroll
            for (int b = 0; b < FIR_BATCH; b++) fresh[b] = pair_at(first_word + b * SPECTRUM_WORDS, sh);
#else
#pragma unroll
            for (int b = 0; b < FIR_BATCH; b++)
                fresh[b] = load_pair(span, __ldg(offsets + m + b) + 2 * u + STEP * (TAPS - 1));
            const u32 off = __ldg(offsets + m);
#endif
#pragma unroll
            for (int b = 0; b < FIR_BATCH; b++) {
                slide_in(x, fresh[b]);
                z[b * F_R * F_C] = fir_sum(x, w);
            }
            prev = off + (FIR_BATCH - 1) * STEP;
        } else {
            fir_unslid(span, offsets, m, nb, u, prev, x, w, z);
        }
        __syncthreads();
#endif

        // The batch's R-point FFTs, from zs (this thread's transform, part fh: spectrum m + fb,
        // live if fb < nb), twiddled by W_n^{i k2} and written as rows k2 of the spectrum's matrix.
        // Radix 16 (L = 1): points fh + F_H q.
        float2 v[16];
#pragma unroll
        for (int q = 0; q < 16; q++) v[q] = cb[(fh + F_H * q) * F_C];
        dft<16>(v);
        row_t *dst = out + ((u64)pol * rows_spectra + m - first + fb) * (F_R * F_A) + i0 + fc;
        const bool live = fb < nb;
        if constexpr (F_H == 1) {
            // At R = 16 a branch around the stores measured faster than store_row_if's predicated
            // ones (`fused_fir` 279 against 291 µs at 1024 channels, 286 against 298 at 2048).
            if (live) {
#pragma unroll
                for (int k2 = 0; k2 < 16; k2++)
                    dst[k2 * F_A] = make_row(cmul(v[k2], tw_i[k2 * F_C + fc]), row_key, m + fb, pol, k2 * F_A + i0 + fc);
            }
        } else if constexpr (F_H == 2) {
            // Radix 2 (L = 16) within the pair of threads fh = 0, 1 (lanes F_C apart): butterfly
            // g = fh + 2 bb takes point g of each one's 16, the partner's by shuffle, with no
            // shared memory or barrier (through shared memory, R = 32 took 15% longer than R = 16).
            // Row k2 = fh + 2 bb + 16 q and its twiddles at immediate offsets from these.
            row_t *d = dst + fh * F_A;
            const float2 *twi = tw_i + fh * F_C + fc, *twr = tw_r + fh;
            asm("" : "+l"(d)); // kept, not rebuilt for every store (as `span`)
            const u32 u0 = fh * F_A + i0 + fc;
#pragma unroll
            for (int bb = 0; bb < 8; bb++) {
                float2 a[2]; // butterfly g = fh + 2 bb
                pair_inputs(v[2 * bb], v[2 * bb + 1], fh, F_C, a);
                a[1] = cmul(a[1], twr[2 * bb]);
                dft<2>(a);
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    const int k2 = 2 * bb + 16 * q; // less fh
                    store_row_if(live, d + k2 * F_A, make_row(cmul(a[q], twi[k2 * F_C]), row_key, m + fb, pol, u0 + k2 * F_A));
                }
            }
        } else { // F_H == 4
            // Radix 4 (L = 16) over the 4 threads fh = t0 + 2 t1 of a transform (lanes F_C
            // apart), as two radix-2 exchanges by shuffle like R = 32's, with no shared memory
            // or barrier. Thread t holds V_t[k] (k < 16), and
            //   X[k + 16 (q0 + 2 q1)] = sum_t0 W_2^{t0 q1} W_64^{t0 (k + 16 q0)} Y_t0[k, q0],
            //   Y_t0[k, q0] = sum_t1 W_2^{t1 q0} W_32^{t1 k} V_{t0 + 2 t1}[k].
            // First the pairs t1 = 0, 1 (lanes 2 F_C apart): thread t1 makes Y for k = t1 + 2 bb;
            // then the pairs t0 = 0, 1 (lanes F_C apart): thread t0 makes X for q0 = t0.
            const u32 t0 = fh & 1, t1 = fh >> 1;
            float2 y[8][2];
#pragma unroll
            for (int bb = 0; bb < 8; bb++) {
                pair_inputs(v[2 * bb], v[2 * bb + 1], t1, 2 * F_C, y[bb]);
                y[bb][1] = cmul(y[bb][1], tw_r[2 * t1 + 4 * bb]); // W_64^{2k}
                dft<2>(y[bb]);
            }
            // Rows k2 = t1 + 2 bb + 16 t0 + 32 q1, their twiddles at immediate offsets.
            const u32 r0 = t1 + 16 * t0;
            row_t *d = dst + r0 * F_A;
            const float2 *twi = tw_i + r0 * F_C + fc, *twr = tw_r + r0;
            asm("" : "+l"(d)); // kept, not rebuilt for every store (as `span`)
            const u32 u0 = r0 * F_A + i0 + fc;
#pragma unroll
            for (int bb = 0; bb < 8; bb++) {
                float2 a[2];
                pair_inputs(y[bb][0], y[bb][1], t0, F_C, a);
                a[1] = cmul(a[1], twr[2 * bb]); // W_64^{k + 16 q0}
                dft<2>(a);
#pragma unroll
                for (int q1 = 0; q1 < 2; q1++) {
                    const int k2 = 2 * bb + 32 * q1; // less r0
                    store_row_if(live, d + k2 * F_A, make_row(cmul(a[q1], twi[k2 * F_C]), row_key, m + fb, pol, u0 + k2 * F_A));
                }
            }
        }
#if FIR_AHEAD
        slide = slide_next;
        slide_next = slide_after;
#endif
    }
}

// Pass 2. Block (p, g): rows r0 = p and r1 = R - p (p = 0: rows 0 and R/2, each its own partner)
// of F_M consecutive spectra from g F_M (8 where A >= 512, up to 64), both polarisations: 2A
// channels. Where A >= 512 the block is two halves, one a polarisation, that meet only at the
// output tile: a half's transforms, fix-ups and rotations are its own, so it runs its steps
// between barriers of its own (`bar.sync` over half the block) and the two drift apart as two
// blocks would, instead of all warps waiting at each barrier for the slowest (where A = 2048 a
// block has the SM to itself). Below 512 the block is one group, whose threads take both
// polarisations (halves there cost more than they gave; kernels/HISTORY.md, "Version 13").
//
// A step takes F_SB spectra: a group's rows (spectrum, polarisation, row) are transformed side by
// side, A / 16 threads each; each thread then makes 16 values (channel, polarisation) of its
// group into a shared tile [slot][spectrum], written out at the end so that each channel's F_M
// spectra go out as one run (32 bytes or more at 8 bits: shorter runs cost device memory a
// partial sector each).
//
// Slot s < 2A: row r_{s div A}, k1 = s mod A, channel k = R k1 + row. Its partner Z_{n-k} is in
// row (R - row) mod R at k1' = (A - k1) mod A for row 0, A - 1 - k1 otherwise.
// Row `row` of spectrum m (the rows hold spectra first.. from their spectrum 0) and polarisation pol.
__device__ __forceinline__ const row_t *row_at(const row_t *rows_in, u32 rows_spectra, u32 first, u32 pol, u32 m, u32 row) {
    return rows_in + (((u64)pol * rows_spectra + m - first) * F_R + row) * F_A;
}

#define F2_HALVES (F_A >= 512)
#define F2_POLS (F2_HALVES ? 1 : 2)                // polarisations a thread takes
#define F2_GROUP (F2_THREADS / (3 - F2_POLS))      // threads that share transforms and barriers
#define F2_J (8 / F2_POLS)                         // channels a row, A / F2_J apart, a thread takes
#define F2_PAD (F_A + F_A / 16)                    // a transform's values in shared memory, padded
#define F2_TW twiddles_from(F_A, 16)

#if 2 * F2_POLS * F_SB * F_A / 16 != F2_GROUP || F_SB * F_A / F2_J != F2_GROUP || F2_GROUP % 32 != 0
#error "fused_post: every thread takes 16 points of one transform, then 16 values (channel, polarisation) of its group"
#endif
#if POST_EARLY < 0 || POST_EARLY > 16
#error "fused_post: POST_EARLY is 0 to 16 of a step's 16 row loads"
#endif
#if F2_J % POST_GATHER != 0
#error "fused_post: a row's channels are gathered POST_GATHER at a time"
#endif
#if (F_A / F2_J) % 16 != 0
#error "fused_post: a thread's channels must lie a multiple of 16 slots apart (immediate offsets)"
#endif

// The barrier of a thread's group: the block's, or one half's (named barriers 1 and 2).
struct GroupSync {
    u32 id;
    __device__ __forceinline__ void operator()() const {
        if (F2_HALVES) asm volatile("bar.sync %0, %1;" : : "r"(id), "n"(F2_GROUP) : "memory");
        else __syncthreads();
    }
};

// The barrier of a transform's A / 16 threads (POST_ROW_SYNC): its warp's where they are one
// warp or part of one (A <= 512), else a named barrier of its own (3 to 6: a block has 4
// transforms of A / 16 threads where A >= 1024). Between a transform's stages nobody else reads
// its values; its group meets only where they do (before a step's first writes, after its last
// stage), which leaves a step 2 barriers of the group instead of 4 to 6.
struct RowSync {
    u32 id;
    __device__ __forceinline__ void operator()() const {
#if F_A / 16 <= 32
        __syncwarp();
#else
        asm volatile("bar.sync %0, %1;" : : "r"(id), "n"(F_A / 16) : "memory");
#endif
    }
};
#if F_A / 16 > 32 && F2_THREADS / (F_A / 16) > 4
#error "fused_post: named barriers 3 to 6 take at most 4 transforms a block"
#endif

// The tile's index of (slot, spectrum): rows of F_M, the spectrum XOR-swizzled by the slot so that
// both the writes (consecutive slots) and the reads (consecutive spectra) fall in distinct banks.
__device__ __forceinline__ u32 tile_swizzle(u32 s) {
    const u32 x = F_M >= 32 ? s : (s * F_M) >> 5;
    return x & (F_M - 1);
}
__device__ __forceinline__ u32 tile_at(u32 s, u32 mm) { return s * F_M + (mm ^ tile_swizzle(s)); }

// Dynamic shared memory of a block (kernels::Config::fused_post_smem says the same).
#define F2_SMEM_FLOAT2 (4 * F_SB * F2_PAD + F2_TW)

// Two blocks an SM of 256 threads, or one of 512 (A = 2048): 128 registers a thread either way.
extern "C" __global__ void __launch_bounds__(F2_THREADS, 512 / F2_THREADS) fused_post(
    const row_t *__restrict__ rows_in,   // [pol][rows_spectra][F_R][F_A], from fused_fir
    const float2 *__restrict__ fixup,    // [CHANNELS]: exp(-i pi k / n)
    const float2 *__restrict__ wn,       // [CHANNELS]: W_n^t
    const float2 *__restrict__ gains,    // [pol][CHANNELS]: half the complex gain
    float row_unscale,                   // 1 / fused_fir's row_scale
    const float4 *__restrict__ rotation, // [pol][spectra]: (fine delay r, dither key bits, cos p, sin p)
    qjones *__restrict__ out,            // [heap][CHANNELS][SPECTRA_PER_HEAP]
    u64 *__restrict__ saturated,         // [pol], accumulated
    u32 spectra,                         // of the frame
    u32 first,                           // this launch's spectra: first..first + count, read
    u32 count,                           // from the rows' spectrum 0 on
    u32 rows_spectra)
{
    extern __shared__ float2 smem[];
    float2 *rows = smem;                      // [spectrum][pol][2][F2_PAD]
    float2 *tw = smem + 4 * F_SB * F2_PAD;    // the later stages' twiddles
    qjones *tile = (qjones *)(tw + F2_TW);    // [2A][F_M], swizzled
    __shared__ u32 sat_block[2];
    __shared__ float2 steps[2][F_SB][2][F2_J]; // [pol][spectrum][row index][j]: exp(i p) exp(-i pi (j n/J + row - r0) r / n)
    __shared__ float2 fine[2][F_SB];           // [pol][spectrum]: (r, dither key bits)

    const u32 tid = threadIdx.x;
    // A half's polarisation (warp-uniform), or 0: the thread's polarisations are pol0 + pp.
    const u32 pol0 = F2_HALVES ? tid / F2_GROUP : 0, t = F2_HALVES ? tid % F2_GROUP : tid;
    const GroupSync group_sync{1 + pol0};
    const u32 p = blockIdx.x;
    const u32 row0 = p, row1 = p == 0 ? F_R / 2 : F_R - p;
    const u32 end = first + count;
    if (tid < 2) sat_block[tid] = 0;
    fill_twiddles<F_A, 16, 0, F2_THREADS>(tw, wn);

    // The FFT's thread: transform ft = (spectrum, polarisation, row index) of its group, part fh.
    const u32 fh = t % (F_A / 16), ft = t / (F_A / 16);
    const u32 fsb = ft / (2 * F2_POLS), fpol = pol0 + (ft / 2) % F2_POLS, fri = ft & 1;
    float2 *x = rows + (4 * fsb + 2 * fpol + fri) * F2_PAD;
#if POST_ROW_SYNC
    const RowSync stage_sync{3 + tid / (F_A / 16)};
#else
    const GroupSync stage_sync = group_sync;
#endif

    // The post-processing's thread (sb, b): channels k = f + j n/J (j < J) of each row, with
    // f = R b + row (b < A/J), at slots k1 = b + j A/J. Their gains and fix-up twiddles stay in
    // registers for the block's spectra (read from L2 per spectrum, they outweighed the rows);
    // of the fix-ups only j < 4: exp(-i pi (k + n/2) / n) is -i exp(-i pi k / n).
    const u32 psb = t / (F_A / F2_J), pb = t % (F_A / F2_J);
    float2 fx[2][4], gn[2][F2_J][F2_POLS];
#pragma unroll
    for (u32 ri = 0; ri < 2; ri++) {
#pragma unroll
        for (u32 j = 0; j < F2_J; j++) {
            const u32 k = F_R * pb + (ri ? row1 : row0) + j * (CHANNELS / F2_J);
            if (j < 4) fx[ri][j] = __ldg(fixup + k);
#pragma unroll
            for (u32 pp = 0; pp < F2_POLS; pp++) {
                const float2 gk = __ldg(gains + (pol0 + pp) * CHANNELS + k);
                gn[ri][j][pp] = make_float2(gk.x * row_unscale, gk.y * row_unscale);
            }
        }
    }
    __syncthreads(); // the twiddles are in

    // The block's groups of F_M spectra: blockIdx.y, then every gridDim.y-th, so that its start
    // (twiddles, gains) is paid once for several.
    u32 sat[F2_POLS] = {};
    const u32 mg_first = first + blockIdx.y * F_M;
    // Point q of the thread's transform in step m0's rows (a spectrum past the end: any row will do).
    auto row_point = [&](u32 m0, int q) {
        const u32 m = min(m0 + fsb, end - 1);
        return row_at(rows_in, rows_spectra, first, fpol, m, fri ? row1 : row0) + fh + (F_A / 16) * q;
    };
    // The radix-16 stage's inputs. With POST_EARLY the first POST_EARLY of a step's 16 are loaded
    // during the step before, ahead of its post-processing, so that their latency passes behind
    // that work rather than after the barrier that starts the step.
    row_t raw[16];
#if POST_EARLY
    if (mg_first < end) {
#pragma unroll
        for (int q = 0; q < POST_EARLY; q++) raw[q] = load_row_here(row_point(mg_first, q));
    }
#endif
    for (u32 mg = mg_first; mg < end; mg += gridDim.y * F_M) {
        for (u32 m0 = mg; m0 < mg + F_M && m0 < end; m0 += F_SB) {
#if POST_PREFETCH
            // The rows of the block's step POST_PREFETCH steps on into L2 (one bulk prefetch a
            // row, by 4 F_SB threads), so that when that step loads them it waits on L2, not on
            // device memory (ncu: long-scoreboard stalls halved). A hint: a step guessed wrong
            // costs bandwidth, never bytes.
            if (tid < 4 * F_SB) {
                u32 ma = m0 + POST_PREFETCH * F_SB;
                if (ma >= mg + F_M) ma += (gridDim.y - 1) * F_M; // into the block's next group
                ma += tid / 4;
                if (ma < end) {
                    const row_t *r = row_at(rows_in, rows_spectra, first, (tid / 2) & 1, ma, (tid & 1) ? row1 : row0);
                    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" : : "l"(r), "n"(F_A * (int)sizeof(row_t)) : "memory");
                }
            }
#endif
            // Radix 16 (L = 1) straight from the rows, 16 loads in flight a thread, and the
            // spectra's fringe phases and delays (for the threads that fill the rotations below):
            // loaded before the barrier, which only guards shared memory, so that their latency
            // passes while it waits.
#pragma unroll
            for (int q = POST_EARLY; q < 16; q++) raw[q] = load_row_here(row_point(m0, q));
            const bool fills = t < 2 * F2_POLS * F_SB;
            const u32 fill_pol = pol0 + (t / 2) % F2_POLS, fill_sb = t / (2 * F2_POLS);
            float4 rot = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (fills) rot = load_here(rotation + (u64)fill_pol * spectra + min(m0 + fill_sb, end - 1));
            group_sync(); // the group's step before is done with its rows and rotations
            {
                float2 v[16];
#pragma unroll
                for (int q = 0; q < 16; q++) v[q] = from_row(raw[q]);
                dft<16>(v);
#pragma unroll
                for (int q = 0; q < 16; q++) x[17 * fh + q] = v[q]; // pad16(16 fh + q)
            }
            // The spectra's rotations: exp(i p) exp(-i pi j r / J) for part j of the band, as
            // postproc's steps, for row r0 and (times the step from r0) r1.
            if (fills) {
                const u32 ri = t & 1, pol = fill_pol, sb = fill_sb;
                const bool small = fabsf(rot.x) <= 1.0f;
                const float2 step = fine_rotation(1.0f / F2_J, rot.x, small);
                float2 r = make_float2(rot.z, rot.w);
                // Row r1's channels are r1 - r0 (0 < r1 - r0 <= R) past row r0's.
                if (ri) r = cmul(r, fine_rotation((float)(row1 - row0) / (float)CHANNELS, rot.x, small));
#pragma unroll
                for (int j = 0; j < F2_J; j++) {
                    steps[pol][sb][ri][j] = r;
                    r = cmul(r, step);
                }
                if (!ri) fine[pol][sb] = make_float2(rot.x, rot.y);
            }
            stage_sync(); // the rotations are read after the last stage's barrier, the group's
            later_stages<F_A, 16, 0>(x, fh, tw, stage_sync, group_sync);
#if POST_EARLY
            {
                // The block's next step: in this group, else the first of its next group.
                const u32 next = m0 + F_SB < mg + F_M && m0 + F_SB < end ? m0 + F_SB : mg + gridDim.y * F_M;
#pragma unroll
                for (int q = 0; q < POST_EARLY; q++) raw[q] = load_row_here(row_point(next, q));
            }
#endif

            // The fine-delay rotation exp(-i pi k r / n) of channel k = f + j n/J in row r_ri is
            // steps[ri][j] (the fringe phase, part j's step, and for row r1 the step from r0)
            // times exp(-i pi (R b + r0) r / n), |angle| <= pi/J: one polynomial a polarisation.
            {
                const u32 sb = psb, b = pb;
                const u32 mm = m0 - mg + sb;
                if (m0 + sb < end) {
                    float2 base[F2_POLS];
#pragma unroll
                    for (u32 pp = 0; pp < F2_POLS; pp++) {
                        const float r = fine[pol0 + pp][sb].x;
                        base[pp] = fine_rotation((float)(F_R * b + row0) / (float)CHANNELS, r, fabsf(r) <= 1.0f);
                    }
#pragma unroll
                    for (u32 ri = 0; ri < 2; ri++) {
                        const u32 row = ri ? row1 : row0;
                        const u32 pri = p == 0 ? ri : 1 - ri;
                        // Z_k at k1 = b + j A/J and its partner at A - 1 - k1, or (A - k1) mod A in
                        // row 0: both move by j A/J 17/16 padded values, immediates past j = 0
                        // (A/J is a multiple of 16).
                        const u32 p_top = row == 0 ? F_A - b : F_A - 1 - b; // k1' + j A/J
                        // Operands are read POST_GATHER channels at a time, and with POST_AHEAD
                        // the next channels' before this ones' arithmetic: before any tile store
                        // that follows them, since the compiler cannot tell the tile from the
                        // rows in shared memory and keeps each load behind the stores before it.
                        float2 zks[F2_J][F2_POLS], pks[F2_J][F2_POLS], sts[F2_J][F2_POLS];
                        auto gather = [&](u32 j0) {
#pragma unroll
                            for (u32 j = j0; j < j0 + POST_GATHER; j++) {
#pragma unroll
                                for (u32 pp = 0; pp < F2_POLS; pp++) {
                                    const u32 pol = pol0 + pp;
                                    const float2 *xs = rows + (4 * sb + 2 * pol) * F2_PAD;
                                    zks[j][pp] = xs[ri * F2_PAD + pad16(b) + j * (F_A / F2_J) / 16 * 17];
                                    const float2 *ps = xs + pri * F2_PAD;
                                    pks[j][pp] = j == 0 ? ps[pad16(p_top & (F_A - 1))] : ps[pad16(p_top) - (int)(j * (F_A / F2_J) / 16 * 17)];
                                    sts[j][pp] = steps[pol][sb][ri][j];
                                }
                            }
                        };
                        if constexpr (POST_AHEAD != 0) gather(0);
#pragma unroll
                        for (u32 j0 = 0; j0 < F2_J; j0 += POST_GATHER) {
                            if constexpr (POST_AHEAD == 0) gather(j0);
                            else if (j0 + POST_GATHER < F2_J) gather(j0 + POST_GATHER);
#pragma unroll
                            for (u32 j = j0; j < j0 + POST_GATHER; j++) {
                                const u32 k1 = b + j * (F_A / F2_J);
                                const float2 f = j < 4 ? fx[ri][j] : cmul_mi(fx[ri][j - 4]);
                                qpol q[F2_POLS];
#pragma unroll
                                for (u32 pp = 0; pp < F2_POLS; pp++) {
                                    const u32 pol = pol0 + pp;
                                    const float2 zk = zks[j][pp], pk = pks[j][pp];
                                    // X = (E - i fx D) / 2, E = Z + conj P, D = Z - conj P; the 1/2 is in the gain.
                                    float2 xk = csub(cadd(zk, cconj(pk)), cmul(f, make_float2(-(zk.y + pk.y), zk.x - pk.x)));
                                    const float2 rg = cmul(cmul(sts[j][pp], base[pp]), gn[ri][j][pp]);
                                    xk = cmul(xk, rg);
#if DITHER
                                    xk = cadd(xk, dither(__float_as_uint(fine[pol][sb].y), F_R * b + row + j * (CHANNELS / F2_J), pol));
#endif
                                    q[pp] = make_qpol(quantise(xk, sat[pp]));
                                }
                                const u32 at = tile_at(ri * F_A + k1, mm);
                                if constexpr (F2_POLS == 2) tile[at] = join_pols(q[0], q[1]);
                                else ((qpol *)tile)[2 * at + pol0] = q[0];
                            }
                        }
                    }
                }
            }
        }
        __syncthreads(); // the tile is whole

        // Out. A whole group that starts 16 bytes into a heap: each thread moves 4 spectra of a
        // channel (16 bytes at 8 bits) with one load and one store. Spectrum mm of slot s lies at
        // mm ^ c in the tile's row (c = tile_swizzle(s)), so quarter q of the run is the row's
        // quarter q ^ c/4, its 4 values in the order j ^ (c mod 4).
#if OUT_BITS == 8
        if (SPECTRA_PER_HEAP % F_M == 0 && mg % 4 == 0 && mg + F_M <= end) {
            const u32 heap = mg / SPECTRA_PER_HEAP, m_in = mg % SPECTRA_PER_HEAP;
            const uint4 *tile4 = (const uint4 *)tile;
            for (u32 e = tid; e < 2 * F_A * F_M / 4; e += F2_THREADS) {
                const u32 s = e / (F_M / 4), q = e % (F_M / 4), c = tile_swizzle(s);
                uint4 v = tile4[s * (F_M / 4) + (q ^ (c >> 2))];
                if (c & 1) v = make_uint4(v.y, v.x, v.w, v.z);
                if (c & 2) v = make_uint4(v.z, v.w, v.x, v.y);
                const u32 k = F_R * (s % F_A) + (s < F_A ? row0 : row1);
                st_global((uint4 *)(out + ((u64)heap * CHANNELS + k) * SPECTRA_PER_HEAP + m_in + 4 * q), v);
            }
        } else
#endif
        {
            // Else one value a thread: consecutive threads take consecutive spectra of a slot, so
            // each channel's run of F_M spectra is written by neighbouring lanes.
            for (u32 e = tid; e < 2 * F_A * F_M; e += F2_THREADS) {
                const u32 s = e / F_M, mm = e % F_M, m = mg + mm;
                if (m >= end) continue;
                const u32 ri = s / F_A, k1 = s % F_A;
                const u32 k = F_R * k1 + (ri ? row1 : row0);
                out[((u64)(m / SPECTRA_PER_HEAP) * CHANNELS + k) * SPECTRA_PER_HEAP + m % SPECTRA_PER_HEAP] = tile[tile_at(s, mm)];
            }
        }
        // The tile is read before the next group writes it (with halves, their own barriers do
        // not see to that).
        if (F2_HALVES) __syncthreads();
    }
#pragma unroll
    for (u32 pp = 0; pp < F2_POLS; pp++)
        if (sat[pp]) atomicAdd(&sat_block[pol0 + pp], sat[pp]);
    __syncthreads();
    if (tid < 2 && sat_block[tid]) atomicAdd(saturated + tid, (u64)sat_block[tid]);
}
