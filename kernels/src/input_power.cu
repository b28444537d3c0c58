// Input sensors (engine/src/signal/power.rs): per polarisation, the sum of squared samples of the
// frame's new chunk and the count of samples at either end of the range, for the rms in dBFS and
// the full-scale count (|v| >= SAMPLE_MAX, katgpucbf's saturation rule: -512, -511 and 511 at 10
// bits). Integer sums, so the figures are those of every other backend. It reads
// the packed chunk once (1.25 bytes a sample at 10 bits), beside the 18 the other passes move.

#define SAMPLE_MAX ((1 << (SAMPLE_BITS - 1)) - 1)

extern "C" __global__ void __launch_bounds__(256) input_power(
    const u32 *__restrict__ span, // [pol][stride] packed samples, readable 2 words on
    u64 stride,                   // words from one polarisation's row to the next
    u64 first_pair,               // the chunk's first sample / 2 (the overlap comes before it)
    u64 pairs,                    // the chunk's samples / 2
    u64 *__restrict__ sums)       // [pol]: sum of squares, [2 + pol]: full-scale samples; accumulated
{
    const u32 pol = blockIdx.y;
    span += pol * stride;
    u64 squares = 0;
    u32 full = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += (u64)gridDim.x * blockDim.x) {
        const float2 v = load_pair(span, (u32)(2 * (first_pair + i))); // spans < 2^32 samples (host)
        const int a = (int)v.x, b = (int)v.y;
        squares += (u64)((u32)(a * a) + (u32)(b * b)); // each square <= 2^30
        full += (abs(a) >= SAMPLE_MAX) + (abs(b) >= SAMPLE_MAX);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        squares += __shfl_down_sync(0xffffffffu, squares, o);
        full += __shfl_down_sync(0xffffffffu, full, o);
    }
    if ((threadIdx.x & 31) == 0) {
        if (squares) atomicAdd(sums + pol, squares);
        if (full) atomicAdd(sums + 2 + pol, (u64)full);
    }
}
