//! The two-pass kernels' cheapest fusion, measured before anything is built on it: cuFFT with the PFB FIR as
//! its LTO load callback (compiled by NVRTC with -dlto, linked into cuFFT's kernel by
//! `cufftXtSetJITCallback`). The FFT then reads the packed 10-bit input itself instead of the FIR
//! kernel's float32 output: the FIR's write and the FFT's read (8 B a sample) disappear.
//!
//! It times the callback FFT of one frame (2^26 samples a polarisation, 16 taps, the unzipped
//! n/4-point transforms of the CUDA backend) against the plain FFT of the same size and a device
//! copy, in the same run, and checks a few spectra against float64 (rustfft).
//!
//!     cargo run --release -p fengine --example fir_callback_probe -- [channels] [taps]
//!
//! `PROBE_DIAGNOSE=1` instead tries eight ways of declaring and compiling a trivial callback and
//! prints which of them cuFFT links; `PROBE_TRIVIAL=1` times a callback that only reads its element.

use std::ffi::{c_char, c_int, c_void, CString};
use std::time::Instant;

use cudarc::cufft::sys as fft;
use cudarc::driver::{sys as drv, CudaContext};
use cudarc::nvrtc::sys as rtc;
use rustfft::{num_complex::Complex64, FftPlanner};

const SAMPLES: usize = 1 << 26; // per polarisation per frame
const BITS: usize = 10;
const POLS: usize = 2;
const UNZIP: usize = 4;
/// CUFFT_CB_LD_COMPLEX in cufftXt.h.
const LOAD_COMPLEX: c_int = 0;

/// CUDA_C_32F in library_types.h.
const C32F: c_int = 4;

type XtMakePlanMany = unsafe extern "C" fn(
    c_int,
    c_int,
    *mut i64,
    *mut i64,
    i64,
    i64,
    c_int,
    *mut i64,
    i64,
    i64,
    c_int,
    i64,
    *mut usize,
    c_int,
) -> c_int;

type SetJit = unsafe extern "C" fn(
    c_int,
    *const c_char,
    *const c_void,
    usize,
    c_int,
    *mut *mut c_void,
) -> c_int;

fn ok(r: drv::CUresult, what: &str) {
    assert_eq!(r, drv::CUresult::CUDA_SUCCESS, "{what}");
}

fn ck(r: fft::cufftResult, what: &str) {
    assert_eq!(r, fft::cufftResult::CUFFT_SUCCESS, "cuFFT {what}");
}

fn alloc(bytes: usize) -> drv::CUdeviceptr {
    let mut p = 0;
    ok(unsafe { drv::cuMemAlloc_v2(&mut p, bytes) }, "allocating");
    p
}

/// A new device buffer holding `v`.
fn device_copy<T>(v: &[T]) -> drv::CUdeviceptr {
    let bytes = std::mem::size_of_val(v);
    let p = alloc(bytes);
    ok(
        unsafe { drv::cuMemcpyHtoD_v2(p, v.as_ptr() as *const c_void, bytes) },
        "copying in",
    );
    p
}

fn download<T: Default + Clone>(p: drv::CUdeviceptr, n: usize) -> Vec<T> {
    let mut v = vec![T::default(); n];
    let bytes = std::mem::size_of_val(&v[..]);
    ok(
        unsafe { drv::cuMemcpyDtoH_v2(v.as_mut_ptr() as *mut c_void, p, bytes) },
        "copying out",
    );
    v
}

/// The callback's LTO IR.
fn lto_ir(src: &str, arch: &str) -> Vec<u8> {
    let src = CString::new(src).unwrap();
    let opts: Vec<CString> = [
        format!("-arch={arch}"),
        "--relocatable-device-code=true".into(),
        "-default-device".into(),
        "-dlto".into(),
    ]
    .into_iter()
    .map(|o| CString::new(o).unwrap())
    .collect();
    let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    unsafe {
        let mut prog = std::ptr::null_mut();
        let r = rtc::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            c"fir_callback.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        assert_eq!(r, rtc::nvrtcResult::NVRTC_SUCCESS);
        let r = rtc::nvrtcCompileProgram(prog, ptrs.len() as c_int, ptrs.as_ptr());
        if r != rtc::nvrtcResult::NVRTC_SUCCESS {
            let mut n = 0;
            rtc::nvrtcGetProgramLogSize(prog, &mut n);
            let mut log = vec![0u8; n];
            rtc::nvrtcGetProgramLog(prog, log.as_mut_ptr() as *mut c_char);
            panic!("NVRTC: {r:?}\n{}", String::from_utf8_lossy(&log));
        }
        let mut n = 0;
        assert_eq!(
            rtc::nvrtcGetLTOIRSize(prog, &mut n),
            rtc::nvrtcResult::NVRTC_SUCCESS
        );
        let mut ir = vec![0u8; n];
        assert_eq!(
            rtc::nvrtcGetLTOIR(prog, ir.as_mut_ptr() as *mut c_char),
            rtc::nvrtcResult::NVRTC_SUCCESS
        );
        ir
    }
}

fn callback_source(channels: usize, taps: usize, spectra: usize) -> String {
    format!(
        r#"
typedef unsigned int u32;
typedef unsigned long long u64;
#define CH {channels}
#define TAPS {taps}
#define A (CH / 4)
#define M {spectra}
#define BITS {BITS}
struct Info {{ const u32 *span; const float2 *w; u64 pol_words; }};
__device__ __forceinline__ u32 bswap32(u32 x) {{ return __byte_perm(x, 0, 0x0123); }}
__device__ __forceinline__ float2 load_pair(const u32 *span, u64 x) {{
    const u64 bit = x * BITS, w = bit >> 5;
    const u32 hi = bswap32(__ldg(span + w)), lo = bswap32(__ldg(span + w + 1));
    const u32 top = __funnelshift_l(lo, hi, (u32)bit & 31u);
    return make_float2((float)((int)top >> (32 - BITS)), (float)((int)(top << BITS) >> (32 - BITS)));
}}
// Element `offset` of [pol][m][j][i] (sub-sequence j = u mod 4, i = u / 4) is z_u of spectrum m.
// cuFFT declares the callback as C++ with an unsigned long long offset: the name it links is
// mangled with those parameter types (`PROBE_DIAGNOSE=1` shows which declarations link).
__device__ float2 fir_load(void *in, u64 offset, void *info, void *shared) {{
    const Info *p = (const Info *)info;
    const u64 i = offset % A, r = offset / A, q = r / 4, m = q % M;
    const u32 j = (u32)(r % 4), pol = (u32)(q / M), u = 4 * (u32)i + j;
    const u32 *span = p->span + pol * p->pol_words;
    float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int t = 0; t < TAPS; t++) {{
        const float2 x = load_pair(span, m * 2 * CH + 2 * u + (u64)2 * CH * t);
        const float2 w = __ldg(p->w + t * CH + u);
        acc.x = fmaf(x.x, w.x, acc.x);
        acc.y = fmaf(x.y, w.y, acc.y);
    }}
    return acc;
}}
"#
    )
}

/// cuFFT's entry points for LTO callbacks, which cudarc does not bind, from the same libcufft.
struct Jit(libloading::Library);

impl Jit {
    fn load() -> Self {
        Self(unsafe { libloading::Library::new("libcufft.so.12") }.expect("libcufft.so.12"))
    }

    /// A plan of `batch` in-place C2C transforms of `len` points whose loads call `symbol` in
    /// `ir` with `info` as its caller info; and what `cufftXtSetJITCallback` and
    /// `cufftXtMakePlanMany` returned (0: success).
    fn plan(
        &self,
        ir: &[u8],
        symbol: &std::ffi::CStr,
        info: drv::CUdeviceptr,
        len: usize,
        batch: usize,
    ) -> (fft::cufftHandle, c_int, c_int) {
        let set_jit: libloading::Symbol<SetJit> =
            unsafe { self.0.get(b"cufftXtSetJITCallback\0") }.expect("cufftXtSetJITCallback");
        let make: libloading::Symbol<XtMakePlanMany> =
            unsafe { self.0.get(b"cufftXtMakePlanMany\0") }.expect("cufftXtMakePlanMany");
        let mut plan: fft::cufftHandle = 0;
        ck(unsafe { fft::cufftCreate(&mut plan) }, "create");
        let mut info_ptr = info as *mut c_void;
        let set = unsafe {
            set_jit(
                plan,
                symbol.as_ptr(),
                ir.as_ptr() as *const c_void,
                ir.len(),
                LOAD_COMPLEX,
                &mut info_ptr,
            )
        };
        let (mut n, mut work) = ([len as i64], 0usize);
        let null = std::ptr::null_mut();
        let (len, batch) = (len as i64, batch as i64);
        let made = unsafe {
            make(
                plan,
                1,
                n.as_mut_ptr(),
                null,
                1,
                len,
                C32F,
                null,
                1,
                len,
                C32F,
                batch,
                &mut work,
                C32F,
            )
        };
        (plan, set, made)
    }
}

/// Which way of declaring and compiling a trivial callback cuFFT links: `PROBE_DIAGNOSE=1`.
fn diagnose(major: i32, minor: i32) {
    let jit = Jit::load();
    let mut version = 0;
    unsafe { fft::cufftGetVersion(&mut version) };
    println!("cuFFT version {version}");
    let info = alloc(64);
    for linkage in ["", "extern \"C\" "] {
        for offset in ["unsigned long", "unsigned long long"] {
            for arch in [
                format!("compute_{major}{minor}"),
                format!("sm_{major}{minor}"),
            ] {
                let src = format!(
                    "{linkage}__device__ float2 cb(void *in, {offset} o, void *info, void *sh) \
                     {{ return ((float2 *)in)[o]; }}"
                );
                let ir = lto_ir(&src, &arch);
                let (plan, set, r) = jit.plan(&ir, c"cb", info, 256, 4);
                println!("{linkage:>11}| {offset:>18} | {arch}: set {set}, plan {r}");
                unsafe { fft::cufftDestroy(plan) };
            }
        }
    }
}

fn device() -> std::sync::Arc<CudaContext> {
    // The backend's probe checks the libraries first: cudarc panics where libcuda is missing.
    match fengine::backend::cuda::probe(0).and_then(|_| {
        CudaContext::new(0).map_err(|e| fengine::backend::BackendError::Device(e.to_string()))
    }) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("fir_callback_probe needs a CUDA device: {e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    if std::env::var_os("PROBE_DIAGNOSE").is_some() {
        let ctx = device();
        ctx.bind_to_thread().unwrap();
        let (major, minor) = ctx.compute_capability().unwrap();
        return diagnose(major, minor);
    }
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let channels = args.first().copied().unwrap_or(32768);
    let taps = args.get(1).copied().unwrap_or(16);
    let spectra = SAMPLES / (2 * channels);
    let len = channels / UNZIP;
    let batch = POLS * spectra * UNZIP;
    let span_samples = SAMPLES + (taps - 1) * 2 * channels;
    let pol_words = (span_samples * BITS / 8).div_ceil(4) + 2;

    let ctx = device();
    ctx.bind_to_thread().unwrap();
    let (major, minor) = ctx.compute_capability().unwrap();
    // LTO IR for the virtual architecture: cuFFT's JIT link finishes it for the device.
    let arch = format!("compute_{major}{minor}");
    let stream = ctx.new_stream().unwrap();

    // Random 10-bit samples, packed MSB first; random weights.
    let mut state = 0x9E3779B97F4A7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut samples: Vec<Vec<i16>> = Vec::new();
    let mut packed = vec![0u8; POLS * pol_words * 4];
    for pol in 0..POLS {
        let s: Vec<i16> = (0..span_samples)
            .map(|_| (next() % 1024) as i16 - 512)
            .collect();
        let row = pol * pol_words * 4;
        spead::samples::pack(
            &s,
            BITS as u32,
            &mut packed[row..row + span_samples * BITS / 8],
        );
        samples.push(s);
    }
    let weights: Vec<[f32; 2]> = (0..taps * channels)
        .map(|_| {
            let a = (next() % 2001) as f32 / 1000.0 - 1.0;
            let b = (next() % 2001) as f32 / 1000.0 - 1.0;
            [a, b]
        })
        .collect();
    let (span, w) = (device_copy(&packed), device_copy(&weights));
    let info_dev = device_copy(&[span, w, pol_words as u64]);
    let data = alloc(batch * len * 8);

    // The callback plan.
    let t0 = Instant::now();
    let src = match std::env::var_os("PROBE_TRIVIAL") {
        // A callback that only reads its element: whether the JIT link works at all.
        Some(_) => "__device__ float2 fir_load(void *in, unsigned long long offset, void *info, \
                    void *shared) { return ((float2 *)in)[offset]; }"
            .to_string(),
        None => callback_source(channels, taps, spectra),
    };
    let ir = lto_ir(&src, &arch);
    println!("LTO IR: {} bytes", ir.len());
    let (cb_plan, set, made) = Jit::load().plan(&ir, c"fir_load", info_dev, len, batch);
    assert_eq!(set, 0, "cufftXtSetJITCallback: {set}");
    assert_eq!(made, 0, "cufftXtMakePlanMany with the callback: {made}");
    ck(
        unsafe { fft::cufftSetStream(cb_plan, stream.cu_stream() as _) },
        "stream",
    );
    let plan_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut plain: fft::cufftHandle = 0;
    ck(
        unsafe {
            fft::cufftPlan1d(
                &mut plain,
                len as c_int,
                fft::cufftType::CUFFT_C2C,
                batch as c_int,
            )
        },
        "plain plan",
    );
    ck(
        unsafe { fft::cufftSetStream(plain, stream.cu_stream() as _) },
        "stream",
    );
    let copy_dst = alloc(batch * len * 8);

    let p = data as *mut fft::cufftComplex;
    let timed = |what: &dyn Fn()| -> f64 {
        let ev = || {
            ctx.new_event(Some(drv::CUevent_flags::CU_EVENT_DEFAULT))
                .unwrap()
        };
        what(); // warm-up
        let mut v = Vec::new();
        for _ in 0..20 {
            let (a, b) = (ev(), ev());
            a.record(&stream).unwrap();
            what();
            b.record(&stream).unwrap();
            b.synchronize().unwrap();
            v.push(a.elapsed_ms(&b).unwrap() as f64 * 1e3);
        }
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let cb_us = timed(&|| {
        ck(
            unsafe { fft::cufftExecC2C(cb_plan, p, p, -1) },
            "callback FFT",
        )
    });
    let result: Vec<[f32; 2]> = download(data, batch * len);
    let fft_us = timed(&|| ck(unsafe { fft::cufftExecC2C(plain, p, p, -1) }, "plain FFT"));
    let bytes = batch * len * 8;
    let copy_us = timed(&|| {
        ok(
            unsafe { drv::cuMemcpyDtoDAsync_v2(copy_dst, data, bytes, stream.cu_stream()) },
            "device copy",
        )
    });
    let copy_gbps = 2.0 * bytes as f64 / copy_us * 1e-3;

    // A few spectra against float64.
    let mut planner = FftPlanner::<f64>::new();
    let f64fft = planner.plan_fft_forward(len);
    let (mut worst, mut rms) = (0f64, 0f64);
    for (pol, m) in [(0usize, 0usize), (1, spectra / 2), (1, spectra - 1)] {
        for j in 0..UNZIP {
            let mut z: Vec<Complex64> = (0..len)
                .map(|i| {
                    let u = 4 * i + j;
                    let mut acc = Complex64::new(0.0, 0.0);
                    for t in 0..taps {
                        let x = m * 2 * channels + 2 * u + 2 * channels * t;
                        let w = weights[t * channels + u];
                        acc.re += w[0] as f64 * samples[pol][x] as f64;
                        acc.im += w[1] as f64 * samples[pol][x + 1] as f64;
                    }
                    acc
                })
                .collect();
            f64fft.process(&mut z);
            let row = ((pol * spectra + m) * UNZIP + j) * len;
            for (k, want) in z.iter().enumerate() {
                let got = result[row + k];
                let d = Complex64::new(got[0] as f64 - want.re, got[1] as f64 - want.im).norm();
                worst = worst.max(d);
                rms += want.norm_sqr();
            }
        }
    }
    let rms = (rms / (3 * UNZIP * len) as f64).sqrt();
    let gsps = SAMPLES as f64 / cb_us * 1e-3;
    println!(
        "{channels} channels, {taps} taps, {BITS}-bit input, {spectra} spectra a polarisation, \
         {batch} transforms of {len} points"
    );
    println!("callback FFT (FIR in cuFFT's loads): {cb_us:.1} µs = {gsps:.1} Gsample/s per pol");
    println!("plain FFT of the same size:          {fft_us:.1} µs");
    println!(
        "device copy of the FFT's buffer:     {copy_us:.1} µs = {copy_gbps:.0} GB/s (read + write)"
    );
    println!("planning with the callback (NVRTC + JIT LTO): {plan_ms:.0} ms");
    println!(
        "against float64 (3 spectra x 4 transforms): worst error {worst:.3e}, {:.2e} of the rms {rms:.3e}",
        worst / rms
    );
    unsafe {
        fft::cufftDestroy(cb_plan);
        fft::cufftDestroy(plain);
    }
}
