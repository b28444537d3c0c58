//! Can one bulk tensor copy (TMA, sm_90) bring a `fused_fir` block's sample words for a
//! batch into shared memory? The block needs, for each of a batch's 16 spectra and each of its R
//! column groups, the same few words at a fixed word offset: a 3-D box of words x groups x spectra
//! at strides of 1, 2A x bits / 32 and 2n x bits / 32 words. The box may start anywhere (the
//! coarse delay moves it by single samples), so a group's words may run past the end of its
//! stride: the map's innermost extent must then reach past its next stride (overlapping strides),
//! or the copy fills those words with zeros. This probe asks the driver to encode such a map and
//! checks, word by word, what copies at several offsets bring, beside the map with no overlap.
//! The box starts on 16 bytes (a start 5 words in was an illegal instruction): a block would
//! copy from its first word rounded down to 4 and find its columns up to 3 words in.
//!
//!     cargo run --release -p fengine --example tma_probe
//!
//! Prints one line a map and offset, and exits non-zero if a copy the driver accepted brought
//! wrong words.

use cudarc::driver::{sys as drv, CudaContext, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use fengine::backend::cuda::{compile_cubin, word_map};

/// Words of a group's stride (2A samples of 10 bits at A = 1024) and of a spectrum's (2n samples
/// at n = 32768): as at 32768 channels, R = 32.
const GROUP_WORDS: u64 = 640;
const SPECTRUM_WORDS: u64 = 20480;
const GROUPS: u32 = 32;
const SPECTRA: u32 = 16;
/// Words of a box row: 8 columns of 20 bits need 6 from any word, and a box starts on 16 bytes
/// (4 words: a copy from elsewhere is an illegal instruction on the H200), so up to 3 more.
const BOX_WORDS: u32 = 12;
const BOX: usize = (BOX_WORDS * GROUPS * SPECTRA) as usize;

/// A `CUtensorMap` as a kernel argument (`const __grid_constant__`), 64-byte aligned.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct TensorMap([u64; 16]);
// SAFETY: plain bytes, passed by value as the kernel's parameter.
unsafe impl DeviceRepr for TensorMap {}

const SRC: &str = r#"
struct __align__(64) TensorMap { unsigned long long v[16]; };
extern "C" __global__ void copy_box(const __grid_constant__ TensorMap map, int c0, unsigned *out) {
    __shared__ __align__(128) unsigned box[BOX];
    __shared__ __align__(8) unsigned long long bar;
    const unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
    const unsigned sbox = (unsigned)__cvta_generic_to_shared(box);
    for (int i = threadIdx.x; i < BOX; i += blockDim.x) box[i] = 0xdeadbeefu;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" : : "r"(sbar));
        asm volatile("fence.proxy.async.shared::cta;");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" : : "r"(sbar), "r"(BOX * 4) : "memory");
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                     : : "r"(sbox), "l"(&map), "r"(c0), "r"(0), "r"(0), "r"(sbar) : "memory");
    }
    asm volatile("{\n.reg .pred p;\nWAIT%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra WAIT%=;\n}" : : "r"(sbar) : "memory");
    for (int i = threadIdx.x; i < BOX; i += blockDim.x) out[i] = box[i];
}
"#;

fn main() {
    if let Err(e) = run() {
        eprintln!("tma_probe: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let ctx = CudaContext::new(0).map_err(|e| format!("no CUDA device: {e}"))?;
    let (major, minor) = ctx.compute_capability().map_err(|e| e.to_string())?;
    if major < 9 {
        return Err(format!("tensor copies need sm_90, not sm_{major}{minor}"));
    }
    let stream = ctx.default_stream();
    let src = format!("#define BOX {BOX}\n{SRC}");
    let cubin = compile_cubin(&src, &format!("sm_{major}{minor}")).map_err(|e| e.to_string())?;
    let module = ctx
        .load_module(Ptx::from_binary(cubin))
        .map_err(|e| e.to_string())?;
    let kernel = module
        .load_function("copy_box")
        .map_err(|e| e.to_string())?;

    // Word i holds i, so that every copied word says where it came from.
    let words = SPECTRUM_WORDS * (SPECTRA as u64 + 1);
    let host: Vec<u32> = (0..words as u32).collect();
    let span = stream.clone_htod(&host).map_err(|e| e.to_string())?;
    let mut out = stream.alloc_zeros::<u32>(BOX).map_err(|e| e.to_string())?;

    let mut wrong = 0;
    for (what, inner) in [
        ("no overlap (innermost extent = group stride)", GROUP_WORDS),
        ("overlapping strides (innermost extent = whole span)", words),
    ] {
        let (ptr, _sync) = span.device_ptr(&stream);
        let map = match encode(ptr, inner) {
            Ok(map) => map,
            Err(e) => {
                println!("{what}: the driver refused the map: {e}");
                continue;
            }
        };
        for c0 in [0u32, 4, 628, 632, 636, 640 * 3 + 8, 20000] {
            let mut launch = stream.launch_builder(&kernel);
            launch.arg(&map).arg(&c0).arg(&mut out);
            // SAFETY: the kernel writes BOX words of `out` and reads the map's span.
            unsafe {
                launch.launch(LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (128, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(|e| format!("{what}, offset {c0}: launch: {e}"))?;
            let got = stream
                .clone_dtoh(&out)
                .map_err(|e| format!("{what}, offset {c0}: {e}"))?;
            let (mut right, mut zero, mut other) = (0, 0, 0);
            for (i, &g) in got.iter().enumerate() {
                let (w, j, s) = (
                    i as u64 % BOX_WORDS as u64,
                    i as u64 / BOX_WORDS as u64 % GROUPS as u64,
                    i as u64 / (BOX_WORDS * GROUPS) as u64,
                );
                let want = c0 as u64 + w + GROUP_WORDS * j + SPECTRUM_WORDS * s;
                match g {
                    _ if g as u64 == want => right += 1,
                    0 => zero += 1,
                    _ => other += 1,
                }
            }
            println!(
                "{what}, offset {c0}: {right} of {BOX} words right, {zero} zero-filled, {other} other"
            );
            if inner > GROUP_WORDS && right != BOX {
                wrong += 1;
            }
        }
    }
    if wrong > 0 {
        return Err(format!(
            "{wrong} copies with overlapping strides brought wrong words"
        ));
    }
    Ok(())
}

/// A 3-D map of u32 words (innermost extent `inner`) at `ptr`, strides of a group and a spectrum.
fn encode(ptr: drv::CUdeviceptr, inner: u64) -> Result<TensorMap, String> {
    let map = word_map(
        ptr,
        [inner, GROUPS as u64, SPECTRA as u64],
        [4 * GROUP_WORDS, 4 * SPECTRUM_WORDS],
        [BOX_WORDS, GROUPS, SPECTRA],
    )
    .map_err(|e| e.to_string())?;
    // SAFETY: CUtensorMap is 16 u64s, 64-byte aligned, like TensorMap.
    Ok(unsafe { std::mem::transmute::<drv::CUtensorMap, TensorMap>(map) })
}
