// Narrowband (engine docs/signal-path.md, Narrowband): the span mixed to baseband, low-pass
// filtered and subsampled by DECIMATION (`ddc`), a complex PFB over 2n subsampled points (`nb_fir`),
// cuFFT's 2n-point complex transforms (done by the host crate), and `nb_postproc`: the centre half
// of the bins, fine delay and fringe phase about the centre, gain, dither, quantisation and the
// heap layout. Appended after postproc.cu (it reuses load_pair, quantise, dither, make_qjones).
//
// Extra configuration:
//   DECIMATION   D: 8, 16 or 32
//   DDC_TAPS     L: the DDC filter's length
//   DDC_OUTPUTS  subsampled samples each `ddc` thread computes

#define NB_POINTS (2 * CHANNELS) // points of the complex FFT: twice the kept channels

// y[j] = exp(-2 pi i phase(t_j)) sum_k x[jD + k] z_k, z_k = h_k exp(-2 pi i phase(k)) from the host
// for the frame's mixer word F: phase(t + k) = phase(t) + phase(k) mod 2^32 exactly, so only the
// rotation of each output needs the absolute time, phase(t_j) = phase0 + j phase_step (u32, wraps).
//
// Each thread computes DDC_OUTPUTS consecutive outputs j0 + i (katgpucbf's scheme): with k = pD + q
// (taps zero-padded to DDC_W D), y[j0 + i] sums x[(j0 + i + p) D + q] z[pD + q]; for each pair of
// phases q, q + 1 the thread unpacks the DDC_OUTPUTS + DDC_W - 1 sample pairs it needs once and
// uses each for up to DDC_W outputs, so unpacking costs a fraction of the multiply-adds.
#define DDC_W ((DDC_TAPS + DECIMATION - 1) / DECIMATION) // taps per phase
#define DDC_RUN (DDC_OUTPUTS + DDC_W - 1)                // sample pairs per phase pair

extern "C" __global__ void __launch_bounds__(256) ddc(
    const u32 *__restrict__ span,    // [pol][span_words] packed samples (padded by 2 words)
    u64 span_words,                  // words per polarisation
    const float2 *__restrict__ taps, // [DDC_W * DECIMATION]: z_k, zero past DDC_TAPS
    float2 *__restrict__ out,        // [pol][samples]
    u32 samples,                     // subsampled samples per polarisation
    u64 last_pair,                   // the span's last even sample index (reads are clamped to it)
    u32 phase0,                      // mixer phase of the span's first sample (2^-32 turns)
    u32 phase_step)                  // mixer phase over DECIMATION samples
{
    const u32 j0 = (blockIdx.x * blockDim.x + threadIdx.x) * DDC_OUTPUTS;
    const u32 pol = blockIdx.y;
    if (j0 >= samples) return;
    span += pol * span_words;
    float2 acc[DDC_OUTPUTS];
#pragma unroll
    for (int i = 0; i < DDC_OUTPUTS; i++) acc[i] = make_float2(0.0f, 0.0f);
#pragma unroll 1
    for (u32 q = 0; q < DECIMATION; q += 2) {
        // Past the span only for outputs beyond `samples`, which are not stored.
        float2 x[DDC_RUN];
#pragma unroll
        for (int r = 0; r < DDC_RUN; r++) x[r] = load_pair(span, min((u64)(j0 + r) * DECIMATION + q, last_pair));
#pragma unroll
        for (int p = 0; p < DDC_W; p++) {
            const float2 z0 = __ldg(taps + p * DECIMATION + q), z1 = __ldg(taps + p * DECIMATION + q + 1);
#pragma unroll
            for (int i = 0; i < DDC_OUTPUTS; i++) {
                const float2 v = x[i + p];
                acc[i].x = fmaf(v.x, z0.x, fmaf(v.y, z1.x, acc[i].x));
                acc[i].y = fmaf(v.x, z0.y, fmaf(v.y, z1.y, acc[i].y));
            }
        }
    }
#pragma unroll
    for (int i = 0; i < DDC_OUTPUTS; i++) {
        const u32 j = j0 + i;
        if (j >= samples) break;
        // exp(-2 pi i phase), the phase taken as signed turns in [-1/2, 1/2).
        const u32 ph = phase0 + j * phase_step;
        const float turns = (float)(int)ph * 2.3283064365386963e-10f; // 2^-32
        out[(u64)pol * samples + j] = cmul(acc[i], expipi(-2.0f * turns));
    }
}

// Complex PFB: point i of spectrum m sums taps t of the window that starts at subsampled sample
// offsets[m] / D. One thread per point.
extern "C" __global__ void __launch_bounds__(256) nb_fir(
    const float2 *__restrict__ ddc_out, // [pol][samples]
    u32 samples,
    const u32 *__restrict__ offsets,    // [pol][spectra] window start in the span, input samples
    const float *__restrict__ weights,  // [TAPS][NB_POINTS]
    float2 *__restrict__ out,           // [pol][spectra][NB_POINTS]
    u32 spectra)
{
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    const u32 m = blockIdx.y, pol = blockIdx.z;
    if (i >= NB_POINTS) return;
    const u32 j0 = __ldg(offsets + (u64)pol * spectra + m) / DECIMATION;
    const float2 *x = ddc_out + (u64)pol * samples + j0 + i;
    float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int t = 0; t < TAPS; t++) {
        const float w = __ldg(weights + t * NB_POINTS + i);
        const float2 v = x[(u64)t * NB_POINTS];
        acc.x = fmaf(w, v.x, acc.x);
        acc.y = fmaf(w, v.y, acc.y);
    }
    out[((u64)pol * spectra + m) * NB_POINTS + i] = acc;
}

// Channel c is bin (c - n/2) mod 2n, turned by exp(i (p' - pi k' r' / n)) with k' = c - n/2 its
// offset from the centre, then gain, dither, quantisation. One thread per channel and spectrum,
// both polarisations (one output element).
extern "C" __global__ void __launch_bounds__(256) nb_postproc(
    const float2 *__restrict__ fft,      // [pol][spectra][NB_POINTS]
    const float2 *__restrict__ gains,    // [pol][CHANNELS]: the complex gain
    const float4 *__restrict__ rotation, // [pol][spectra]: (r' subsampled samples, dither key bits, cos p', sin p')
    qjones *__restrict__ out,            // [heap][CHANNELS][SPECTRA_PER_HEAP]
    u64 *__restrict__ saturated,         // [pol], accumulated
    u32 spectra)
{
    const u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    const u32 m = blockIdx.y;
    if (c >= CHANNELS) return;
    const int k = (int)c - CHANNELS / 2;
    const u32 bin = (u32)(k + NB_POINTS) % NB_POINTS;
    char2 q[2];
#pragma unroll
    for (int pol = 0; pol < 2; pol++) {
        const float4 rot = __ldg(rotation + (u64)pol * spectra + m);
        float2 x = fft[((u64)pol * spectra + m) * NB_POINTS + bin];
        const float2 turn = cmul(make_float2(rot.z, rot.w), expipi(-((float)k / (float)CHANNELS) * rot.x));
        x = cmul(x, cmul(turn, __ldg(gains + pol * CHANNELS + c)));
#if DITHER
        x = cadd(x, dither(__float_as_uint(rot.y), c, pol));
#endif
        u32 clamped = 0;
        q[pol] = make_char2((signed char)quantise(x.x, clamped), (signed char)quantise(x.y, clamped));
        if (clamped) atomicAdd(saturated + pol, 1ull);
    }
    const u32 heap = m / SPECTRA_PER_HEAP, sh = m % SPECTRA_PER_HEAP;
    out[((u64)heap * CHANNELS + c) * SPECTRA_PER_HEAP + sh] = make_qjones(q[0], q[1]);
}
