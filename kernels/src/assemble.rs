//! A module's text: its configuration's `#define`s, then the CUDA C files it needs, each
//! followed by a newline.

use crate::defines::{self, Define};
use crate::embedded::{COMMON, DDC_SET, FUSED, INPUT_POWER, NARROWBAND, PFB_FIR, POSTPROC};
use crate::validate;
use crate::{Config, ConfigError};

/// The complete CUDA C source of the module for `cfg`: configuration `#define`s, then the kernels.
pub fn source(cfg: &Config) -> String {
    let narrowband = if cfg.decimation > 1 { NARROWBAND } else { "" };
    let fused = if cfg.fused() { FUSED } else { "" };
    text(
        &defines::module(cfg),
        &[COMMON, PFB_FIR, POSTPROC, INPUT_POWER, narrowband, fused],
    )
}

/// The CUDA C source of `ddc_set` for the narrowband outputs `outputs` (each with
/// [`Config::ddc_mma`]; all of one input, so of one sample width, and one tuning).
pub fn ddc_set_source(outputs: &[&Config]) -> Result<String, ConfigError> {
    let first = validate::ddc_set_outputs(outputs)?;
    Ok(text(&defines::ddc_set(first, outputs), &[COMMON, DDC_SET]))
}

/// `defines` as `#define` lines, then each of `parts` and a newline (an empty part leaves its
/// newline).
fn text(defines: &[Define], parts: &[&str]) -> String {
    let mut src = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum::<usize>() + 1024);
    for (name, value) in defines {
        src.push_str(&format!("#define {name} {value}\n"));
    }
    for part in parts {
        src.push_str(part);
        src.push('\n');
    }
    src
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::cfg;
    use crate::{Tuning, DDC_KERNEL, NARROWBAND_BLOCK, NB_FIR_KERNEL, NB_POSTPROC_KERNEL};

    /// The whole text of a module: the configuration's `#define`s, then the sources in order,
    /// each ending in a newline. Pinned so that a change to how the text is put together shows.
    #[test]
    fn whole_source_of_a_wideband_and_a_narrowband_module() {
        let wideband = "#define CHANNELS 4096\n#define TAPS 16\n#define SAMPLE_BITS 10\n\
            #define UNZIP 4\n#define SPECTRA_PER_HEAP 256\n#define FIR_BLOCK 128\n#define FIR_BATCH 16\n\
            #define PP_ROWS 4\n#define OUT_BITS 8\n#define DITHER 1\n#define DECIMATION 1\n\
            #define DDC_TAPS 0\n#define DDC_OUTPUTS 7\n#define DDC_BLOCK 128\n#define DDC_TILE 16\n\
            #define NB_POINTS 0\n#define NB_UNZIP 1\n#define NB_RUN 64\n\
            #define F_R 32\n#define F_A 128\n#define F_C 8\n#define F_SB 8\n#define F_M 32\n\
            #define F2_THREADS 256\n#define ROW_HALF 0\n#define FIR_WORD_STEPS 0\n#define FIR_AHEAD 0\n\
            #define FIR_TMA 1\n#define FIR_TMA_WORDS 12\n#define POST_PREFETCH 0\n\
            #define POST_ROW_SYNC 1\n#define POST_GATHER 1\n#define POST_AHEAD 1\n#define POST_EARLY 8\n";
        assert_eq!(
            source(&cfg()),
            format!("{wideband}{COMMON}\n{PFB_FIR}\n{POSTPROC}\n{INPUT_POWER}\n\n{FUSED}\n")
        );
        let nb = Config {
            channels: 1024,
            sample_bits: 12,
            output_bits: 4,
            dither: false,
            decimation: 16,
            ddc_taps: 192,
            nb_points: 2048,
            ..cfg()
        };
        let narrowband = "#define CHANNELS 1024\n#define TAPS 16\n#define SAMPLE_BITS 12\n\
            #define UNZIP 4\n#define SPECTRA_PER_HEAP 256\n#define FIR_BLOCK 128\n#define FIR_BATCH 16\n\
            #define PP_ROWS 4\n#define OUT_BITS 4\n#define DITHER 0\n#define DECIMATION 16\n\
            #define DDC_TAPS 192\n#define DDC_OUTPUTS 7\n#define DDC_BLOCK 128\n#define DDC_TILE 16\n\
            #define NB_POINTS 2048\n#define NB_UNZIP 1\n#define NB_RUN 64\n";
        assert_eq!(
            source(&nb),
            format!("{narrowband}{COMMON}\n{PFB_FIR}\n{POSTPROC}\n{INPUT_POWER}\n{NARROWBAND}\n\n")
        );
        let b = Config {
            decimation: 8,
            ddc_taps: 97,
            ..nb.clone()
        };
        let set = "#define SAMPLE_BITS 12\n#define UNZIP 4\n#define DDC_SET_N 3\n\
            #define DDC_MMA_WARPS 4\n#define DDC_SET_SPAN 8192\n\
            #define DDC_SET_CASES case 0: ddc_block<16, 12, 0, 2>(raw, xs, stretch, pol, set); break; \
            case 1: ddc_block<8, 13, 1, -1>(raw, xs, stretch, pol, set); break; case 2: break; \n\
            #define DDC_SET_RAW 3138\n";
        assert_eq!(
            ddc_set_source(&[&nb, &b, &nb]).unwrap(),
            format!("{set}{COMMON}\n{DDC_SET}\n")
        );
    }

    #[test]
    fn narrowband_kernels_only_for_narrowband() {
        assert!(!source(&cfg()).contains("nb_postproc("));
        let nb = Config {
            decimation: 16,
            ddc_taps: 192,
            nb_points: 8192,
            ..cfg()
        };
        nb.validate().unwrap();
        let src = source(&nb);
        assert!(src.contains("#define DECIMATION 16\n#define DDC_TAPS 192\n"));
        for k in [DDC_KERNEL, NB_FIR_KERNEL, NB_POSTPROC_KERNEL] {
            assert!(src.contains(&format!(" {k}(")), "{k}");
        }
        assert!(src.contains(&format!("__launch_bounds__({NARROWBAND_BLOCK}) nb_fir(")));
        let bad = Config {
            decimation: 4,
            ..nb.clone()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("8, 16 or 32"));
        // Without discard: n points, every bin kept; the module differs only in NB_POINTS.
        let all = Config {
            nb_points: 4096,
            ..nb.clone()
        };
        all.validate().unwrap();
        assert_eq!(
            source(&all),
            src.replace("#define NB_POINTS 8192\n", "#define NB_POINTS 4096\n")
        );
        for points in [0, 2048, 3 * 4096] {
            let e = Config {
                nb_points: points,
                ..nb.clone()
            }
            .validate()
            .unwrap_err()
            .to_string();
            assert!(e.contains("4096 or 8192 points"), "{e}");
        }
    }

    #[test]
    fn source_starts_with_the_configuration() {
        let src = source(&cfg());
        assert!(src.starts_with("#define CHANNELS 4096\n#define TAPS 16\n#define SAMPLE_BITS 10\n"));
        assert!(src.contains("#define UNZIP 4\n"));
        assert!(src.contains("#define SPECTRA_PER_HEAP 256\n"));
        assert!(src.contains("#define FIR_BLOCK 128\n"));
        assert!(src.contains("#define FIR_BATCH 16\n"));
        assert!(src.contains("#define PP_ROWS 4\n"));
        assert!(src.contains("#define OUT_BITS 8\n"));
        assert!(src.contains("#define DITHER 1\n"));
        assert!(src.contains("void __launch_bounds__(FIR_BLOCK) pfb_fir("));
        assert!(src.contains("postproc("));
        assert!(src.contains("input_power("));
    }

    #[test]
    fn no_includes_for_nvrtc() {
        assert!(!source(&cfg()).contains("#include"));
    }

    #[test]
    fn ddc_set_pairs_outputs_of_one_shape() {
        let nb = |bits, decimation, ddc_taps, ddc_mma| Config {
            sample_bits: bits,
            decimation,
            ddc_taps,
            tuning: Tuning {
                ddc_mma,
                ..Tuning::default()
            },
            ..cfg()
        };
        let (a, b) = (nb(10, 16, 192, true), nb(10, 8, 97, true));
        let set = ddc_set_source(&[&a, &b]).unwrap();
        assert!(set.contains("#define DDC_SET_N 2\n"));
        assert!(
            set.contains("case 0: ddc_block<16, 12, 0, -1>(")
                && set.contains("case 1: ddc_block<8, 13, 1, -1>(")
        );
        // Outputs of one shape in pairs, whatever lies between them.
        let c = nb(10, 8, 97, true);
        let set = ddc_set_source(&[&b, &a, &c, &b]).unwrap();
        assert!(set.contains("case 0: ddc_block<8, 13, 0, 2>(") && set.contains("case 2: break;"));
        assert!(set.contains("case 1: ddc_block<16, 12, 1, -1>("));
        assert!(set.contains("case 3: ddc_block<8, 13, 3, -1>("));
        assert!(
            !source(&a).contains(" ddc_set("),
            "the set has a module of its own"
        );
        assert!(ddc_set_source(&[&nb(16, 8, 96, true)]).is_err());
        assert!(ddc_set_source(&[]).is_err());
    }
}
