// Narrowband (engine docs/signal-path.md, Narrowband): the span mixed to baseband, low-pass
// filtered and subsampled by DECIMATION (`ddc`), a complex PFB over NB_POINTS subsampled points
// (`nb_fir`), cuFFT's NB_POINTS-point complex transforms, unzipped by 4 where large (done by the
// host crate), and `nb_postproc`: the rest of the FFT for the bins kept, fine delay and fringe
// phase about the centre, gain, dither, quantisation and the heap layout. Appended after
// postproc.cu (it reuses load_pair, quantise, dither, make_qjones). Where the samples are exact
// in float16 the DDC runs instead in the frame's `ddc_set` (ddc_set.cu).
//
// Two kinds of output, told apart by NB_POINTS alone: with discard the DDC subsamples by the
// output's decimation D and the PFB has 2n points, of which the centre half are kept; without
// (katgpucbf's VLBI mode) it subsamples by 2D and the PFB has n points, all kept.
//
// Extra configuration:
//   DECIMATION   S, the DDC's decimation (subsampling): D, or 2D without discard; 8, 16 or 32
//   DDC_TAPS     L: the DDC filter's length
//   DDC_OUTPUTS  C, consecutive subsampled samples each `ddc` thread computes (odd: see below)
//   DDC_BLOCK    threads per block of `ddc`
//   DDC_TILE     taps per phase a thread holds samples for at once (bounds its registers)
//   NB_POINTS    P, points of the complex PFB and FFT: 2n with discard, n without
//   NB_RUN       spectra each `nb_fir` thread computes

#if NB_POINTS != 2 * CHANNELS && NB_POINTS != CHANNELS
#error "NB_POINTS must be 2n (the centre half kept) or n (every bin kept)"
#endif

// y[j] = exp(-2 pi i phase(t_j)) sum_k x[jD + k] z_k, z_k = h_k exp(-2 pi i phase(k)) from the host
// for the frame's mixer word F: phase(t + k) = phase(t) + phase(k) mod 2^32 exactly, so only the
// rotation of each output needs the absolute time, phase(t_j) = phase0 + j phase_step (u32, wraps).
//
// (D here stands for DECIMATION, the DDC's own decimation S.)
//
// With k = pD + q (taps zero-padded to DDC_WP D), y[j] = sum_q sum_p X_q[j + p] z[pD + q] where
// X_q[m] = x[mD + q]: for each phase q a short real-by-complex FIR over the polyphase column X_q.
// A block makes DDC_M = DDC_BLOCK C consecutive outputs. It stages its samples in shared memory
// phase-major, eight phases at a time (one group of 8 consecutive samples, SAMPLE_BITS bytes, per
// row m: coalesced loads, unpacked once), so that lane l reading X_q[lC + r] hits bank
// (lC + r) mod 32: distinct for odd C. Each thread then keeps C accumulators and C + DDC_TILE - 1
// samples in registers, so every sample it loads serves up to DDC_TILE taps of C outputs: the
// kernel is bound by its multiply-adds (2 per tap and input sample), not by loads. The outputs go
// back through shared memory to be stored as whole lines.
#define DDC_W ((DDC_TAPS + DECIMATION - 1) / DECIMATION)           // taps per phase
#define DDC_PT (DDC_W < DDC_TILE ? DDC_W : DDC_TILE)                // taps per tile
#define DDC_WP (((DDC_W + DDC_PT - 1) / DDC_PT) * DDC_PT)           // taps per phase, padded
#define DDC_M (DDC_BLOCK * DDC_OUTPUTS)                            // outputs per block
#define DDC_ROWS (DDC_M + DDC_WP - 1)                              // samples per phase per block
#define DDC_SMEM_TAPS ((8 * DDC_ROWS * 4 + DDC_WP * 8 * 8) <= 48 * 1024)

#if DDC_OUTPUTS % 2 == 0
#error "DDC_OUTPUTS must be odd: the lanes' shared-memory reads would collide in banks"
#endif

extern "C" __global__ void __launch_bounds__(DDC_BLOCK) ddc(
    const u32 *__restrict__ span,    // [pol][stride] packed samples, readable 2 words on
    u64 stride,                      // words from one polarisation's row to the next
    const float2 *__restrict__ taps, // [DDC_WP][DECIMATION]: z_{pD+q}, zero past DDC_TAPS
    float2 *__restrict__ out,        // [pol][samples]
    u32 samples,                     // subsampled samples per polarisation
    u32 first,                       // the first subsampled sample made: the frame's windows
    u32 end,                         // need [first, end) only
    u64 span_samples,                // samples in the span (a multiple of 8); zeros past it
    u32 phase0,                      // mixer phase of the span's first sample (2^-32 turns)
    u32 phase_step)                  // mixer phase over DECIMATION samples
{
    __shared__ __align__(16) float xs[8][DDC_ROWS]; // xs[q][m] = x[(jb + m) D + q0 + q], q0 the group's phase
#if DDC_SMEM_TAPS
    __shared__ float2 zs[DDC_WP][8];  // the group's taps
#endif
    const u32 jb = first + blockIdx.x * DDC_M, pol = blockIdx.y, j0 = threadIdx.x * DDC_OUTPUTS;
    span += pol * stride;
    float2 acc[DDC_OUTPUTS];
#pragma unroll
    for (int i = 0; i < DDC_OUTPUTS; i++) acc[i] = make_float2(0.0f, 0.0f);
#pragma unroll 1
    for (u32 q0 = 0; q0 < DECIMATION; q0 += 8) {
        if (q0) __syncthreads(); // the last group's samples are read
        for (u32 m = threadIdx.x; m < DDC_ROWS; m += DDC_BLOCK) {
            const u64 s = (u64)(jb + m) * DECIMATION + q0;
            float v[8];
            // Past the span only for outputs beyond `samples`, which are not stored.
            if (s < span_samples) {
                unpack8(span, s, v);
            } else {
#pragma unroll
                for (int q = 0; q < 8; q++) v[q] = 0.0f;
            }
#pragma unroll
            for (int q = 0; q < 8; q++) xs[q][m] = v[q];
        }
#if DDC_SMEM_TAPS
        for (u32 i = threadIdx.x; i < DDC_WP * 8; i += DDC_BLOCK)
            zs[i / 8][i % 8] = __ldg(taps + (i / 8) * DECIMATION + q0 + i % 8);
#define DDC_Z(p, q) zs[p][q]
#else
#define DDC_Z(p, q) __ldg(taps + (p) * DECIMATION + q0 + (q))
#endif
        __syncthreads();
#pragma unroll
        for (int q = 0; q < 8; q++) {
#pragma unroll 1
            for (int p0 = 0; p0 < DDC_WP; p0 += DDC_PT) {
                float x[DDC_OUTPUTS + DDC_PT - 1];
#pragma unroll
                for (int r = 0; r < DDC_OUTPUTS + DDC_PT - 1; r++) x[r] = xs[q][j0 + p0 + r];
#pragma unroll
                for (int p = 0; p < DDC_PT; p++) {
                    const float2 z = DDC_Z(p0 + p, q);
#pragma unroll
                    for (int i = 0; i < DDC_OUTPUTS; i++) {
                        acc[i].x = fmaf(x[i + p], z.x, acc[i].x);
                        acc[i].y = fmaf(x[i + p], z.y, acc[i].y);
                    }
                }
            }
        }
#undef DDC_Z
    }
    // Rotate, then store through shared memory as whole lines (xs holds at least 2 DDC_M floats).
    __syncthreads();
    float2 *ys = reinterpret_cast<float2 *>(&xs[0][0]);
#pragma unroll
    for (int i = 0; i < DDC_OUTPUTS; i++) {
        // exp(-2 pi i phase), the phase taken as signed turns in [-1/2, 1/2): the hardware
        // sine and cosine (absolute error under 5e-7 on [-pi, pi], far below the output's LSB;
        // sincospif costs a tenth of the kernel here).
        const u32 ph = phase0 + (jb + j0 + i) * phase_step;
        const float angle = (float)(int)ph * -1.4629180792671596e-9f; // -2 pi 2^-32
        float sn, cs;
        __sincosf(angle, &sn, &cs);
        ys[j0 + i] = cmul(acc[i], make_float2(cs, sn));
    }
    __syncthreads();
    for (u32 m = threadIdx.x; m < DDC_M && jb + m < end; m += DDC_BLOCK)
        out[(u64)pol * samples + jb + m] = ys[m];
}

// Complex PFB: point i of spectrum m sums taps t of the window that starts at subsampled sample
// offsets[m] / S (S = DECIMATION). One thread per point and run of NB_RUN spectra, as `pfb_fir`:
// the point's T weights and a window of T samples stay in registers, and while the delay holds
// (each window NB_POINTS after the last) a spectrum loads one new sample, NB_BATCH spectra's
// together. Reading every window afresh instead costs T reads of the DDC's output, which then
// dominates the output.
#define NB_BATCH 8

__device__ __forceinline__ float2 nb_sum(const float2 (&x)[TAPS], const float (&w)[TAPS]) {
    float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int t = 0; t < TAPS; t++) {
        acc.x = fmaf(w[t], x[t].x, acc.x);
        acc.y = fmaf(w[t], x[t].y, acc.y);
    }
    return acc;
}

extern "C" __global__ void __launch_bounds__(256) nb_fir(
    const float2 *__restrict__ ddc_out, // [pol][samples]
    u32 samples,
    const u32 *__restrict__ offsets,    // [pol][spectra] window start in the span, input samples
    const float *__restrict__ weights,  // [TAPS][NB_POINTS]
    float2 *__restrict__ out,           // [pol][spectra][NB_UNZIP][NB_POINTS / NB_UNZIP]
    u32 spectra)
{
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    const u32 pol = blockIdx.z;
    if (i >= NB_POINTS) return;
    const u32 m0 = blockIdx.y * NB_RUN, m1 = min(m0 + NB_RUN, spectra);
    const float2 *x = ddc_out + (u64)pol * samples + i;
    offsets += (u64)pol * spectra;
    out += (u64)pol * spectra * NB_POINTS + (i % NB_UNZIP) * (NB_POINTS / NB_UNZIP) + i / NB_UNZIP;
    float w[TAPS];
#pragma unroll
    for (int t = 0; t < TAPS; t++) w[t] = __ldg(weights + t * NB_POINTS + i);
    float2 win[TAPS];
    u32 prev = 0;
    for (u32 m = m0; m < m1;) {
        if (m > m0 && m + NB_BATCH <= m1) {
            u32 j[NB_BATCH];
#pragma unroll
            for (int b = 0; b < NB_BATCH; b++) j[b] = __ldg(offsets + m + b) / DECIMATION;
            bool slide = j[0] == prev + NB_POINTS;
#pragma unroll
            for (int b = 1; b < NB_BATCH; b++) slide = slide && j[b] == j[b - 1] + NB_POINTS;
            if (slide) {
                float2 fresh[NB_BATCH];
#pragma unroll
                for (int b = 0; b < NB_BATCH; b++) fresh[b] = x[(u64)j[b] + (u64)(TAPS - 1) * NB_POINTS];
#pragma unroll
                for (int b = 0; b < NB_BATCH; b++) {
#pragma unroll
                    for (int t = 0; t < TAPS - 1; t++) win[t] = win[t + 1];
                    win[TAPS - 1] = fresh[b];
                    out[(u64)(m + b) * NB_POINTS] = nb_sum(win, w);
                }
                prev = j[NB_BATCH - 1];
                m += NB_BATCH;
                continue;
            }
        }
        // One spectrum: slide if the delay is unchanged, else load the whole window.
        const u32 j = __ldg(offsets + m) / DECIMATION;
        if (m > m0 && j == prev + NB_POINTS) {
#pragma unroll
            for (int t = 0; t < TAPS - 1; t++) win[t] = win[t + 1];
            win[TAPS - 1] = x[(u64)j + (u64)(TAPS - 1) * NB_POINTS];
        } else {
#pragma unroll
            for (int t = 0; t < TAPS; t++) win[t] = x[(u64)j + (u64)t * NB_POINTS];
        }
        prev = j;
        out[(u64)m * NB_POINTS] = nb_sum(win, w);
        m++;
    }
}

// Channel c is bin (c - n/2) mod P (P = NB_POINTS). With NB_A = P/4, thread k1 < NB_A makes the
// NB_KEEP = n / NB_A channels c = k1 + h NB_A, h < NB_KEEP, which are bins k1 + k2 NB_A with
// k2 = (h - NB_KEEP/2) mod 4 (as n/2 = NB_KEEP/2 NB_A): with discard (P = 2n) channels k1 (bin
// k1 + 3 NB_A) and k1 + n/2 (bin k1), the other two quarters of the bins dropped; without (P = n)
// channels k1, k1 + n/4, k1 + n/2 and k1 + 3n/4 (k2 = 2, 3, 0, 1), every bin. Where P points
// would take cuFFT two passes through memory (NB_UNZIP 4), the FFT is unzipped by 4 as the
// wideband's (paper, section 4.2): `nb_fir` writes sub-sequence j = i mod 4 of each spectrum's
// points, cuFFT makes their NB_A-point FFTs Y_j, and X[k1 + NB_A k2] = sum_j W_P^{j k1}
// W_4^{j k2} Y_j[k1]: all of the thread's channels from the same four loads.
//
// Each channel is then turned by exp(i (p' - pi k' r' / n)) with k' = c - n/2 its offset from the
// centre, then gain, dither, quantisation. A block is NB_TILE values of k1 x NB_TILE spectra
// (NB_TILE / NB_ROWS spectra per thread), both polarisations: it reads whole lines of the FFT's
// output and, through shared memory, writes whole lines of the channel-major heaps ([heap]
// [channel][spectrum]); one thread per element writing its own 4 bytes a heap apart costs ten
// times more.
#define NB_TILE 32
#define NB_ROWS 8
#define NB_A (NB_POINTS / 4)
#define NB_KEEP (CHANNELS / NB_A)           // channels per thread: 2 with discard, 4 without
#define NB_K2(h) (((h) + 4 - NB_KEEP / 2) % 4) // the quarter of the bins channel k1 + h NB_A is in
#define NB_TW (2 * CHANNELS / NB_POINTS)    // W_P = W_2n^NB_TW: the twiddle table's step
#if NB_UNZIP != 1 && NB_UNZIP != 4
#error "NB_UNZIP must be 1 or 4"
#endif

extern "C" __global__ void __launch_bounds__(NB_TILE * NB_ROWS) nb_postproc(
    const float2 *__restrict__ fft,      // [pol][spectra][NB_UNZIP][NB_POINTS / NB_UNZIP]
    const float2 *__restrict__ twiddles, // [CHANNELS]: exp(-i pi k / n) = W_2n^k
    const float2 *__restrict__ gains,    // [pol][CHANNELS]: the complex gain
    const float4 *__restrict__ rotation, // [pol][spectra]: (r' subsampled samples, dither key bits, cos p', sin p')
    qjones *__restrict__ out,            // [heap][CHANNELS][SPECTRA_PER_HEAP]
    u64 *__restrict__ saturated,         // [pol], accumulated
    u32 spectra)
{
    __shared__ qjones tile[NB_KEEP][NB_TILE][NB_TILE + 1]; // [h][k1][spectrum], padded against bank conflicts
    __shared__ u32 sat[2];
    const u32 c0 = blockIdx.x * NB_TILE, m0 = blockIdx.y * NB_TILE;
    const u32 tx = threadIdx.x % NB_TILE, ty = threadIdx.x / NB_TILE;
    const u32 k1 = c0 + tx;
    u32 clamped[2] = {0, 0};
    if (k1 < NB_A) {
#if NB_UNZIP == 4
        // W_P^{j k1} = W_2n^{j kt}, j = 1..3 (3 kt may pass n: W_2n^n = -1).
        const u32 kt = NB_TW * k1;
        const float2 w1 = __ldg(twiddles + kt), w2 = __ldg(twiddles + 2 * kt);
        const float2 w3 = 3 * kt < CHANNELS ? __ldg(twiddles + 3 * kt) : cmul(make_float2(-1.0f, 0.0f), __ldg(twiddles + 3 * kt - CHANNELS));
#endif
        u32 ch[NB_KEEP];  // the thread's channels
        float kn[NB_KEEP]; // their offsets k' / n
        float2 g[2][NB_KEEP];
#pragma unroll
        for (int h = 0; h < NB_KEEP; h++) {
            ch[h] = k1 + h * NB_A;
            kn[h] = ((float)ch[h] - (float)(CHANNELS / 2)) / (float)CHANNELS;
#pragma unroll
            for (int pol = 0; pol < 2; pol++) g[pol][h] = __ldg(gains + pol * CHANNELS + ch[h]);
        }
        for (u32 r = ty; r < NB_TILE; r += NB_ROWS) {
            const u32 m = m0 + r;
            if (m >= spectra) break;
            char2 q[NB_KEEP][2];
#pragma unroll
            for (int pol = 0; pol < 2; pol++) {
                const float4 rot = __ldg(rotation + (u64)pol * spectra + m);
                const float2 *y = fft + ((u64)pol * spectra + m) * NB_POINTS + k1;
#if NB_UNZIP == 4
                const float2 b0 = y[0], b1 = cmul(y[NB_A], w1), b2 = cmul(y[2 * NB_A], w2), b3 = cmul(y[3 * NB_A], w3);
                const float2 s02 = cadd(b0, b2), d02 = csub(b0, b2), s13 = cadd(b1, b3), d13 = csub(b1, b3);
                // X[k1 + k2 NB_A] = sum_j (-i)^{j k2} b_j: k2 = 0 s02 + s13, 1 d02 - i d13, 2 s02 - s13,
                // 3 d02 + i d13 (those no channel takes are never computed).
                const float2 xk[4] = {cadd(s02, s13), make_float2(d02.x + d13.y, d02.y - d13.x), csub(s02, s13),
                                      make_float2(d02.x - d13.y, d02.y + d13.x)};
#endif
#pragma unroll
                for (int h = 0; h < NB_KEEP; h++) {
#if NB_UNZIP == 4
                    const float2 x = xk[NB_K2(h)];
#else
                    const float2 x = y[NB_K2(h) * NB_A];
#endif
                    const float2 turn = cmul(make_float2(rot.z, rot.w), expipi(-kn[h] * rot.x));
                    float2 v = cmul(x, cmul(turn, g[pol][h]));
#if DITHER
                    v = cadd(v, dither(__float_as_uint(rot.y), ch[h], pol));
#endif
                    q[h][pol] = quantise(v, clamped[pol]);
                }
            }
#pragma unroll
            for (int h = 0; h < NB_KEEP; h++) tile[h][tx][r] = make_qjones(q[h][0], q[h][1]);
        }
    }
    // Saturation: summed over the warp, then the block, then one global atomic per block and
    // polarisation (a saturating output would otherwise queue every thread on two addresses).
#pragma unroll
    for (int pol = 0; pol < 2; pol++)
#pragma unroll
        for (int o = 16; o > 0; o /= 2) clamped[pol] += __shfl_xor_sync(0xffffffffu, clamped[pol], o);
    if (threadIdx.x == 0) sat[0] = sat[1] = 0;
    __syncthreads();
    if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int pol = 0; pol < 2; pol++)
            if (clamped[pol]) atomicAdd(&sat[pol], clamped[pol]);
    }
    __syncthreads();
    if (threadIdx.x < 2 && sat[threadIdx.x]) atomicAdd(saturated + threadIdx.x, (u64)sat[threadIdx.x]);
    // Now lanes run along spectra: a channel's spectra within a heap are contiguous.
    const u32 m = m0 + tx;
    if (m >= spectra) return;
    const u32 heap = m / SPECTRA_PER_HEAP, sh = m % SPECTRA_PER_HEAP;
    for (u32 cc = ty; cc < NB_TILE && c0 + cc < NB_A; cc += NB_ROWS) {
#pragma unroll
        for (int h = 0; h < NB_KEEP; h++)
            out[((u64)heap * CHANNELS + c0 + cc + h * NB_A) * SPECTRA_PER_HEAP + sh] = tile[h][cc][tx];
    }
}
