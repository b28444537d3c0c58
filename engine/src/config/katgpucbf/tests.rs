//! The fixture lines of katsdpcontroller's generator (engine/tests/fixtures), flag by flag, and
//! the refusals.

use clap::Parser;
use placement::CoreSet;

use super::{FgpuArgs, Translation};
use crate::config::EngineConfig;

const FIXTURE: &str = include_str!("../../../tests/fixtures/fgpu-wideband-narrowband.args");

/// The fixture's arguments from `fgpu` on, the interface named `lo` (this host has no
/// enp193s0f0np0) and each `(from, to)` argument replaced.
fn fixture_argv(replace: &[(&str, &str)]) -> Vec<String> {
    let lines = FIXTURE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty());
    lines
        .skip_while(|l| *l != "fgpu")
        .map(|l| l.replace("enp193s0f0np0", "lo"))
        .map(|l| {
            replace
                .iter()
                .find(|(from, _)| l == *from)
                .map_or(l.clone(), |(_, to)| to.to_string())
        })
        .collect()
}

/// The fixture's narrowband output, as its line reads.
const FIXTURE_NARROWBAND: &str =
    "name=gpucbf_antenna_channelised_voltage_narrowband,channels=4096,taps=16,w_cutoff=1.0,\
jones_per_batch=1048576,dst=239.192.0.20+3:7148,window_function=hann,decimation=8,\
centre_frequency=300000000.0,ddc_taps=128,weight_pass=0.005";

fn translate(argv: &[String], started_on: &str) -> Result<Translation, String> {
    let args = FgpuArgs::try_parse_from(argv).map_err(|e| e.to_string())?;
    Translation::new(&args, &started_on.parse::<CoreSet>().unwrap()).map_err(|e| e.to_string())
}

fn refusal(replace: &[(&str, &str)], extra: &[&str]) -> String {
    let mut argv = fixture_argv(replace);
    let src = argv.pop().unwrap();
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv.push(src);
    let checked = translate(&argv, "10")
        .and_then(|t| t.run_args().map_err(|e| e.to_string()))
        .and_then(|r| EngineConfig::from_args(&r).map_err(|e| e.to_string()));
    match checked {
        Ok(c) => panic!("{extra:?} was accepted: {:?}", c.outputs),
        Err(e) => e,
    }
}

/// Every flag of the generator's line lands where docs/katgpucbf.md says, and our own checks
/// accept the result.
#[test]
fn the_generators_fgpu_line_translates_flag_by_flag() {
    let t = translate(&fixture_argv(&[]), "10").unwrap();
    let want = "fengine run \
        --src-pol0 239.192.0.0+7:7148 --src-pol1 239.192.0.8+7:7148 --interface 127.0.0.1 \
        --wideband gpucbf_antenna_channelised_voltage:dst=239.192.0.16+3:7148,channels=4096,\
taps=16,w_cutoff=1,window=hann \
        --narrowband gpucbf_antenna_channelised_voltage_narrowband:dst=239.192.0.20+3:7148,\
channels=4096,taps=16,w_cutoff=1,window=hann,decimation=8,centre=300000000,ddc_taps=128 \
        --spectra-per-heap 256 --heaps-per-frame 1 \
        --adc-sample-rate 1712000000 --sync-time 1700000000 --sample-bits 10 --heap-samples 4096 \
        --feng-id 0 --array-size 2 --packet-payload 8192 --output-bits 8 --ttl 4 \
        --send-rate-factor 1.1 --max-delay 0.0006124859813084112 --socket-buffer 134217728 \
        --katcp 0.0.0.0:37541 --control 0.0.0.0:37542 \
        --src-affinity 8 --dst-affinity 9 --pair-affinity 10 --compute-affinity 10";
    assert_eq!(
        t.argv.join(" "),
        want.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    assert_eq!(t.widen_to, Some("8-10".parse().unwrap()));
    let notes = t.notes.join("\n");
    for said in [
        "katcp on 0.0.0.0:37541",
        "the HTTP API on 0.0.0.0:37542 (--prometheus-port",
        "--recv-ibv/--send-ibv",
        "--aiomonitor",
        "weight_pass=0.005",
        "cores 10",
        "--recv-buffer 134217728 and --send-buffer 1048576",
    ] {
        assert!(notes.contains(said), "{said:?} not in the notes:\n{notes}");
    }
    t.run_args().unwrap();
    // The engine's checks, but for the cores: the fixture's 8-10 need not exist on this host.
    let bare: Vec<String> = fixture_argv(&[])
        .into_iter()
        .filter(|a| !a.contains("affinity"))
        .collect();
    let run = translate(&bare, "10").unwrap().run_args().unwrap();
    let cfg = EngineConfig::from_args(&run).unwrap();
    let names: Vec<_> = cfg.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "gpucbf_antenna_channelised_voltage",
            "gpucbf_antenna_channelised_voltage_narrowband"
        ]
    );
    for k in 0..2 {
        let g = cfg.channelisation(k);
        assert_eq!((g.output.channels, g.output.spectra_per_heap), (4096, 256));
        // fgpu's default dither is uniform: this engine's seeded dither.
        assert!(g.output.dither.is_some());
    }
    assert_eq!(cfg.channelisation(1).output.decimation(), 8);
    // Frames of at most 2^25 samples and 2^23 Jones vectors of any output: one narrowband
    // heap (256 spectra of 2 x 4096 x 8 samples = 2^24), eight wideband ones.
    assert_eq!(cfg.input.geometry.chunk_samples, 1 << 24);
}

/// Without affinities (develop.less_resources) nothing is pinned; without --prometheus-port
/// the HTTP API stays on loopback; katcp on the host given.
#[test]
fn defaults_follow_fgpu() {
    let mut argv: Vec<String> = fixture_argv(&[])
        .into_iter()
        .filter(|a| !a.contains("affinity") && !a.contains("prometheus"))
        .collect();
    argv.insert(1, "--katcp-host=127.0.0.1".into());
    let t = translate(&argv, "0-15").unwrap();
    let line = t.argv.join(" ");
    assert!(line.contains("--katcp 127.0.0.1:37541"), "{line}");
    assert!(line.contains("--control 127.0.0.1:0"), "{line}");
    assert!(!line.contains("affinity"), "{line}");
    assert_eq!(t.widen_to, None);
    // Affinities inside the cores the process was given: pinned, nothing widened.
    let t = translate(&fixture_argv(&[]), "0-15").unwrap();
    assert!(!t.argv.join(" ").contains("pair-affinity"));
    assert_eq!(t.widen_to, None);
    // fgpu's own defaults where the line gives none.
    let t = translate(
        &[
            "fgpu",
            "--recv-interface=lo",
            "--send-interface=lo",
            "--adc-sample-rate=1712e6",
            "--sync-time=0",
            "--wideband=name=w,channels=32768,dst=239.1.1.1+15",
            "239.1.0.0+7,239.1.0.8+7",
        ]
        .map(String::from),
        "0",
    )
    .unwrap();
    let line = t.argv.join(" ");
    for want in [
        "--src-pol0 239.1.0.0+7:7148",
        "w:dst=239.1.1.1+15:7148,channels=32768,taps=16,w_cutoff=1,window=hann",
        "--spectra-per-heap 32",
        "--heaps-per-frame 8",
        "--array-size 65536",
        "--katcp 0.0.0.0:7147",
    ] {
        assert!(line.contains(want), "{want:?} not in {line}");
    }
    assert!(t.run_args().is_ok());
}

/// katgpucbf's VLBI narrowband output (pass_bandwidth=) is this engine's no-discard output, with
/// fgpu's default DDC length for it (32 D).
#[test]
fn pass_bandwidth_makes_a_no_discard_output() {
    let nb = FIXTURE_NARROWBAND;
    let vlbi = nb.replace(",ddc_taps=128", "") + ",pass_bandwidth=64000000.0";
    let argv: Vec<String> = fixture_argv(&[(nb, vlbi.as_str())])
        .into_iter()
        .filter(|a| !a.contains("affinity"))
        .collect();
    let t = translate(&argv, "10").unwrap();
    let line = t.argv.join(" ");
    assert!(
        line.contains("decimation=8,centre=300000000,ddc_taps=256,pass_bandwidth=64000000"),
        "{line}"
    );
    let cfg = EngineConfig::from_args(&t.run_args().unwrap()).unwrap();
    assert_eq!(
        cfg.channelisation(1).output.kind.label(),
        fgpu_api::engine::OutputKind::NarrowbandNoDiscard
    );
}

/// Flags and keys this engine cannot honour are refused with one sentence.
#[test]
fn what_cannot_be_honoured_is_refused_with_a_sentence() {
    let nb = FIXTURE_NARROWBAND;
    let odd_weight = nb.replace("weight_pass=0.005", "weight_pass=0.01");
    let other_batch = nb.replace("channels=4096", "channels=1024");
    for (replace, extra, want) in [
        (
            vec![],
            vec!["--mask-timestamp"],
            "--mask-timestamp works around",
        ),
        (
            vec![],
            vec!["--monitor-log=/tmp/m"],
            "--monitor-log /tmp/m: that file",
        ),
        (
            vec![(nb, odd_weight.as_str())],
            vec![],
            "weight_pass=0.01 tunes",
        ),
        (
            vec![(nb, other_batch.as_str())],
            vec![],
            "256 and 1024 spectra per heap",
        ),
        (
            vec![("--send-interface=lo", "--send-interface=10.1.2.3")],
            vec![],
            "receives and sends on one interface",
        ),
        (
            vec![(
                "239.192.0.0+7:7148,239.192.0.8+7:7148",
                "239.192.0.0+7:7148,239.192.0.9+7:7148,239.192.0.20:7148",
            )],
            vec![],
            "needs an even number",
        ),
        (
            vec![(
                "239.192.0.0+7:7148,239.192.0.8+7:7148",
                "239.192.0.0+6:7148,239.192.0.9+8:7148",
            )],
            vec![],
            "polarisation 0's addresses must be consecutive",
        ),
        (
            vec![
                ("--recv-affinity=8", "--recv-affinity=8,-1"),
                ("--recv-comp-vector=8", "--recv-comp-vector=8,8"),
            ],
            vec![],
            "mixes cores and -1",
        ),
        (
            vec![("--dig-sample-bits=10", "--dig-sample-bits=9")],
            vec![],
            "sample",
        ),
        (
            vec![("--send-ibv", "--use-peerdirect")],
            vec![],
            "--use-peerdirect requires --send-ibv.",
        ),
    ] {
        let e = refusal(&replace, &extra);
        assert!(
            e.contains(want),
            "{replace:?} {extra:?}: {e:?} should say {want:?}"
        );
        assert!(e.trim_end().ends_with('.'), "{e:?}");
    }
    // A pcap capture as the source.
    let file = std::env::temp_dir().join("fgpu-katgpucbf-test.pcap");
    std::fs::write(&file, b"").unwrap();
    let e = refusal(
        &[(
            "239.192.0.0+7:7148,239.192.0.8+7:7148",
            file.to_str().unwrap(),
        )],
        &[],
    );
    assert!(e.contains("katgpucbf's replay mode"), "{e}");
    let _ = std::fs::remove_file(file);
}
