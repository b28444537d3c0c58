#!/usr/bin/env bash
# Checks and benchmarks for a GPU host without a Rust toolchain: build on a machine that has one,
# then carry the binaries over in the folder `stage` fills (gpu-stage/).
#
#   scripts/gpu-checks.sh stage           (build machine) strip release binaries, tests and benches into gpu-stage/
#   scripts/gpu-checks.sh gpu OUT         (GPU host) CUDA tests, kernel/PCIe bench, CPU bench, e2e --backend cuda
#   scripts/gpu-checks.sh net OUT         (GPU host) loopback transport, dsim and harness-receive benches
#   scripts/gpu-checks.sh system OUT      (GPU host) max-rate search (cuda vs null), channel response
#   scripts/gpu-checks.sh qualify OUT     (GPU host) the whole qualification suite, cuda, 32768 channels
#   scripts/gpu-checks.sh qualify-nb OUT  (GPU host) the same on a narrowband and a no-discard output
#
# Each phase writes one log per step into OUT and keeps going past a failed step (the summary at the
# end lists the exit status of each), so that one run on the GPU host gives every figure it can.
set -uo pipefail
cd "$(dirname "$0")/.."
carry=gpu-stage

stage() {
  set -e
  cargo test --workspace --release --no-run
  cargo build --release --workspace --examples
  cargo bench -p spead --no-run
  # The build's folder as cargo has it (CARGO_TARGET_DIR or a cargo config may move it from
  # ./target).
  local release
  release=$(cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"] + "/release")')
  rm -rf "$carry" && mkdir -p "$carry"
  cp "$release"/{dsim,fengine,harness} "$release"/examples/{cuda_bench,rx_bench} "$carry/"
  # The newest test/bench executable of each name (cargo's hashed names in deps/).
  newest() {
    find "$release/deps" -maxdepth 1 -type f -name "$1-*" ! -name '*.d' -printf '%T@ %p\n' \
      | sort -rn | head -1 | cut -d' ' -f2-
  }
  cp "$(newest_for fengine src/lib.rs)" "$carry/fengine-unit"
  cp "$(newest_for fengine tests/e2e/main.rs)" "$carry/fengine-e2e"
  cp "$(newest_for harness tests/e2e.rs)" "$carry/harness-e2e"
  cp "$(newest loopback)" "$carry/spead-loopback"
  cp "$(newest chain)" "$carry/spead-chain"
  cp "$(newest decode)" "$carry/spead-decode"
  strip "$carry"/*
  # Test executables find their sibling binaries by the absolute path cargo built them under
  # (CARGO_BIN_EXE_*): record it, so that the GPU host can put the binaries there.
  echo "$release" > "$carry/target-dir"
  du -sh "$carry"
}

# The test executable cargo built for PACKAGE's TARGET (source path ending), from the workspace
# build's JSON messages: asking cargo for one package alone would unify features differently and
# build it again.
newest_for() {
  cargo test --workspace --release --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
pkg, src = sys.argv[1], sys.argv[2]
def name(pid):  # "path+file:///w/engine#fengine@0.1.0", or "path+file:///w/harness#0.1.0"
    path, _, tail = pid.partition("#")
    return tail.split("@")[0] if "@" in tail else path.rstrip("/").rsplit("/", 1)[-1]
for line in sys.stdin:
    m = json.loads(line)
    if (m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]
            and m["target"]["src_path"].endswith(src)
            and name(m["package_id"]) == pkg):
        print(m["executable"])
        break
' "$1" "$2"
}

declare -a results=()
step() { # step NAME TIMEOUT CMD...: runs CMD, output to OUT/NAME.log and the screen's tail
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "== $name: $*"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -25 "$out/$name.log"
  results+=("$(printf '%-16s rc=%-3s %4d s' "$name" "$rc" $((SECONDS - t0)))")
}

summary() {
  echo "== summary"
  printf '  %s\n' "${results[@]}"
}

host_setup() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv || true
  nproc
  # 12+ GB/s through loopback needs socket buffers far above the 4 MiB default.
  sysctl -q -w net.core.rmem_max=268435456 net.core.wmem_max=268435456
  # The test executables look for their sibling binaries where cargo put them when they were built.
  mkdir -p "$repo_target" && cp "$carry"/{dsim,fengine,harness} "$repo_target/"
}

phase_gpu() {
  # 236 s on an H200 with 22 tests at version 16; the shapes test grew by 3 shapes since, and the
  # no-discard outputs brought two (the oracle checks now compare on every core).
  step cuda-tests 480 "$carry/fengine-unit" cuda --test-threads=1 --nocapture
  step cuda-bench 120 "$carry/cuda_bench" 1024,4096,8192,32768,65536 16 10
  step fengine-bench 60 "$carry/fengine" bench --backend cuda --channels 32768
  step cpu-bench-4k 50 "$carry/fengine" bench --backend cpu --channels 4096 --frames 20
  step cpu-bench-32k 60 "$carry/fengine" bench --backend cpu --channels 32768 --frames 10
}

phase_net() {
  FENGINE_TEST_BACKEND=cuda FENGINE_E2E_BIN_DIR=$PWD/$carry \
    step e2e-cuda 150 "$carry/fengine-e2e" --test-threads=1 --nocapture
  step spead-decode 120 "$carry/spead-decode" --bench
  SPEAD_BENCH_SECS=2 step spead-loopback-1 60 "$carry/spead-loopback" --bench
  SPEAD_BENCH_SECS=2 SPEAD_BENCH_PAIRS=4 step spead-loopback-4 60 "$carry/spead-loopback" --bench
  step dsim-bench 180 "$carry/dsim" bench --rate 6.3e9,max --seconds 5 --groups 8
  step rx-bench 60 "$carry/rx_bench" 12.5 4 10
}

phase_system() {
  # The ceiling the search is measured against, in the same run: raw loopback UDP (GSO/GRO) with
  # 8 sender/receiver pairs, which is all 16 cores doing nothing but moving bytes.
  SPEAD_BENCH_SECS=2 SPEAD_BENCH_PAIRS=8 step loopback-ceiling 90 "$carry/spead-loopback" --bench
  # Where the cores go during the search: the busiest threads every 10 s.
  (while sleep 10; do date +%T; top -H -b -n 1 -w 160 | sed -n '7,40p'; done) > "$out/threads.log" 2>&1 &
  local sampler=$!
  LOW=${LOW:-3e9} HIGH=${HIGH:-9e9} RESOLUTION=${RESOLUTION:-100e6} WARMUP=${WARMUP:-3} WINDOW=${WINDOW:-8} \
    step max-rate "${MAX_RATE_LIMIT:-420}" harness/scripts/gpu-max-rate.sh "$carry" "$out/max-rate"
  kill "$sampler" 2>/dev/null
}

phase_response() {
  step response 420 "$carry/harness" response --local --backend cuda --channels 1024 \
    --integration "${INTEGRATION:-3}" --settle 0.5 --floor-db "${FLOOR_DB:--80}" --out-dir "$out/response"
}

phase_qualify() {
  # The full suite (32 positions, 4000 spectra per measurement) at a rate the harness's
  # whole-band integration keeps up with; the report lands in OUT/qualify. dsim's buffer holds
  # 1024 spectra of distinct noise at 32768 channels: the SFDR's floor falls with it.
  step qualify 560 "$carry/harness" qualify --local --backend cuda --channels 32768 \
    --adc-rate "${QUALIFY_RATE:-200e6}" --substreams 8 --dsim-args "--buffer-heaps 16384" \
    --out-dir "$out/qualify"
}

phase_qualify-nb() {
  # Both narrowband kinds at 8192 channels beside 32768 wideband, side by side (about 10 minutes:
  # the no-discard filter response takes one alias tone a round).
  step qualify-nb 900 harness/scripts/qualify-narrowband.sh "$carry" "$out/qualify-nb"
}

phase=${1:-}
out=${2:-gpu-checks-out}
# Where the staged test executables expect dsim, fengine and harness: the build's target folder as
# `stage` recorded it, else this checkout's.
repo_target=${REPO_TARGET:-$(cat "$carry/target-dir" 2>/dev/null || echo "$PWD/target/release")}
case $phase in
  stage) stage ;;
  gpu | net | system | response | qualify | qualify-nb)
    mkdir -p "$out"
    host_setup
    "phase_$phase"
    summary
    ;;
  *) sed -n '2,11p' "$0"; exit 2 ;;
esac
