#!/usr/bin/env python3
"""Time katgpucbf fgpu's Compute (PFB FIR, cuFFT, postproc) on one GPU, as Gsample/s per polarisation.

The set-up is katgpucbf's own scratch/fgpu/benchmarks/compute_bench.py (BSD-3-Clause, SARAO), cut
to the wideband mode: the same ComputeTemplate, buffer sizes, weights, gains and random 10-bit
input, timed with command-queue markers over --passes passes after one warm-up pass. What it adds:
each kernel alone (pfb_fir, fft, postproc) and the whole chain ("all", as fgpu runs it:
run_wideband_frontend then run_backend), each reported as milliseconds per pass and as the input
rate that time sustains, Gsample/s per polarisation = samples per polarisation per pass / time.

    python3 bench-fgpu.py                      # 32768 channels, 16 taps, 10-bit in, 8-bit out
    python3 bench-fgpu.py --channels 4096 --passes 200
"""

import argparse
import json

import numpy as np
from katsdpsigproc import accel
from katsdptelstate.endpoint import Endpoint

from katgpucbf import DEFAULT_JONES_PER_BATCH, DIG_SAMPLE_BITS
from katgpucbf.fgpu.compute import ComputeTemplate
from katgpucbf.fgpu.engine import generate_pfb_weights
from katgpucbf.fgpu.output import WidebandOutput, WindowFunction
from katgpucbf.utils import DitherType


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=32768)
    parser.add_argument("--taps", type=int, default=16)
    parser.add_argument("--recv-chunk-samples", type=int, default=32 * 1024 * 1024)
    parser.add_argument("--send-chunk-jones", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--jones-per-batch", type=int, help=f"default max({DEFAULT_JONES_PER_BATCH}, 32 x channels)")
    parser.add_argument("--dig-sample-bits", type=int, default=DIG_SAMPLE_BITS)
    parser.add_argument("--send-sample-bits", type=int, default=8, choices=[4, 8])
    parser.add_argument("--passes", type=int, default=500)
    parser.add_argument("--kernels", default="all,pfb_fir,fft,postproc", help="comma list of all, pfb_fir, fft, postproc")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if args.jones_per_batch is None:
        args.jones_per_batch = max(DEFAULT_JONES_PER_BATCH, 32 * args.channels)
    if args.jones_per_batch % args.channels != 0:
        parser.error("--jones-per-batch must be a multiple of --channels")
    kernels = args.kernels.split(",")
    for k in kernels:
        if k not in ("all", "pfb_fir", "fft", "postproc"):
            parser.error(f"unknown kernel {k!r}")
    spectra_per_heap = args.jones_per_batch // args.channels

    rng = np.random.default_rng(seed=1)
    context = accel.create_some_context(device_filter=lambda device: device.is_cuda)
    with context:
        output = WidebandOutput(
            name="benchmark",
            channels=args.channels,
            jones_per_batch=args.jones_per_batch,
            taps=args.taps,
            w_cutoff=1.0,
            window_function=WindowFunction.DEFAULT,
            dither=DitherType.DEFAULT,
            dst=[Endpoint("239.1.1.1", 7148)],
        )
        template = ComputeTemplate(
            context,
            output.taps,
            output.channels,
            args.dig_sample_bits,
            args.send_sample_bits,
            dither=output.dither,
            narrowband=None,
        )
        queue = context.create_tuning_command_queue()
        out_spectra = accel.roundup(args.send_chunk_jones // output.channels, spectra_per_heap)
        frontend_spectra = min(args.recv_chunk_samples // output.spectra_samples, out_spectra)
        extra_samples = output.window - output.spectra_samples
        fn = template.instantiate(
            queue,
            samples=args.recv_chunk_samples + extra_samples,
            spectra=out_spectra,
            spectra_per_heap=spectra_per_heap,
            seed=123,
            sequence_first=456,
        )
        fn.ensure_all_bound()

        h_weights = fn.buffer("weights").empty_like()
        h_weights[:] = generate_pfb_weights(
            output.spectra_samples // output.subsampling, output.taps, output.w_cutoff, output.window_function
        )
        fn.buffer("weights").set(queue, h_weights)
        h_gains = fn.buffer("gains").empty_like()
        h_gains[:] = 1
        fn.buffer("gains").set(queue, h_gains)
        buf = fn.buffer("in")
        h_data = buf.empty_like()
        h_data[:] = rng.integers(0, 256, size=h_data.shape, dtype=np.uint8)
        buf.set(queue, h_data)
        for name in ["fine_delay", "phase", "saturated", "dig_total_power"]:
            if name in fn.slots:
                fn.buffer(name).zero(queue)

        def run_pfb_fir():
            fn.pfb_fir.spectra = frontend_spectra
            fn.pfb_fir()

        def run_fft():
            fn.fft()

        def run_postproc():
            fn.postproc()

        def run_all():
            fn.run_wideband_frontend(fn.buffer("in"), fn.buffer("dig_total_power"), [0, 0], 0, frontend_spectra)
            fn.run_backend(fn.buffer("out"), fn.buffer("saturated"))

        runs = {"all": run_all, "pfb_fir": run_pfb_fir, "fft": run_fft, "postproc": run_postproc}
        # Samples per polarisation that one pass turns into spectra.
        samples = frontend_spectra * output.spectra_samples
        print(
            f"{context.device.name}: {args.channels} channels, {args.taps} taps, {args.dig_sample_bits}-bit in, "
            f"{args.send_sample_bits}-bit out, {spectra_per_heap} spectra/heap, {frontend_spectra} spectra "
            f"= {samples} samples per polarisation a pass, {args.passes} passes"
        )
        results = {}
        for k in kernels:
            run = runs[k]
            run()  # warm-up
            start = queue.enqueue_marker()
            for _ in range(args.passes):
                run()
            end = queue.enqueue_marker()
            queue.finish()
            seconds = end.time_since(start) / args.passes
            rate = samples / seconds / 1e9
            results[k] = {"ms_per_pass": seconds * 1e3, "gsamples_per_s_per_pol": rate}
            print(f"{k:9s} {seconds * 1e3:9.4f} ms/pass  {rate:8.3f} Gsample/s per polarisation")
        if args.json:
            meta = {
                "device": context.device.name,
                "channels": args.channels,
                "taps": args.taps,
                "dig_sample_bits": args.dig_sample_bits,
                "send_sample_bits": args.send_sample_bits,
                "spectra_per_heap": spectra_per_heap,
                "samples_per_pol_per_pass": samples,
                "passes": args.passes,
            }
            with open(args.json, "w") as f:
                json.dump({"config": meta, "kernels": results}, f, indent=2)


if __name__ == "__main__":
    main()
