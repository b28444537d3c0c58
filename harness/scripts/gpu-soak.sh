#!/usr/bin/env bash
# The soak on a GPU host: dsim, fengine --backend cuda and the harness on one host over loopback
# (no Docker there), the system of gpu-max-rate.sh (32768 channels, 16 taps, 10-bit samples,
# 4096-sample input heaps, 8 output substreams), held at FRACTION (default 0.8) of its max rate
# for DURATION seconds (default 1800) with a sample every INTERVAL (default 60).
#
#   harness/scripts/gpu-soak.sh [BIN_DIR [OUT_DIR [extra harness soak arguments]]]
#
# The max rate: MAX_RATE (sample/s per polarisation) when given, else MAX_RATE_JSON (a
# max-rate.json), else a search here first (harness max-rate on the same system, no null
# backend; LOW, HIGH, RESOLUTION, WARMUP, SETTLE, WINDOW as gpu-max-rate.sh; about 5 minutes),
# written to OUT_DIR/max-rate. The harness only counts heaps (--no-content-check), as max-rate
# does, so that the soak runs under the conditions its rate was measured in. BACKEND and
# CHANNELS (defaults cuda, 32768) let the script run on a machine without a GPU (cpu, 1024).
# FARGS (extra engine arguments) defaults to a receive window of 0.5 s: at 3.8 Gsample/s on a
# 16-core H100 host heaps arrived up to 103 ms behind the newest of their polarisation, twice the
# default window (docs/performance.md, "Rates that hold"); FARGS="" gives the default back.
# ENGINE_CORES and OTHER_CORES (taskset lists, both or neither) split the host: the engine runs on
# ENGINE_CORES, dsim and the harness on OTHER_CORES; put the engine's placement flags (for example
# --src-affinity and --dst-affinity within ENGINE_CORES, --lock-memory) in FARGS.
# Writes OUT_DIR/soak/{soak.json,soak-rss.svg,soak-growth.svg}; exits 0 when the soak passed.
set -euo pipefail
bin=${1:-target/release}
out=${2:-harness-soak-gpu}
shift $(( $# < 2 ? $# : 2 ))
mkdir -p "$out"

if [ -n "${ENGINE_CORES:-}${OTHER_CORES:-}" ]; then
  : "${ENGINE_CORES:?ENGINE_CORES and OTHER_CORES go together}" "${OTHER_CORES:?ENGINE_CORES and OTHER_CORES go together}"
  # The harness starts dsim and the engine itself: wrappers give each its cores (a child inherits
  # the harness's, so the engine's must be set again, wider).
  real=$(cd "$bin" && pwd) bin="$out/bin"
  mkdir -p "$bin"
  for prog in dsim fengine; do
    cores=$OTHER_CORES
    [ $prog = fengine ] && cores=$ENGINE_CORES
    printf '#!/bin/sh\nexec taskset -c %s %s/%s "$@"\n' "$cores" "$real" "$prog" > "$bin/$prog"
    chmod +x "$bin/$prog"
  done
  ln -sf "$real/harness" "$bin/harness"
  echo "== engine on cores $ENGINE_CORES, dsim and the harness on $OTHER_CORES"
  exec taskset -c "$OTHER_CORES" env -u ENGINE_CORES -u OTHER_CORES "$0" "$bin" "$out" "$@"
fi

# 12+ GB/s through loopback needs socket buffers far above the 4 MiB default (root only).
sysctl -q -w net.core.rmem_max=268435456 net.core.wmem_max=268435456 \
  || echo "could not raise net.core.{r,w}mem_max (not root?): expect loss at high rates" >&2

system=(--local --backend "${BACKEND:-cuda}"
  --dsim-bin "$bin/dsim" --fengine-bin "$bin/fengine"
  --channels "${CHANNELS:-32768}" --taps 16 --spectra-per-heap 256 --sample-bits 10
  --substreams "${SUBSTREAMS:-8}" --input-addresses "${INPUT_ADDRESSES:-4}"
  --fengine-args "--sample-bits 10 --heap-samples 4096 ${FARGS---recv-window 0.5}"
  --dsim-args "--sample-bits 10 --heap-samples 4096 ${DARGS:-}")

if [ -n "${MAX_RATE:-}" ]; then
  max=(--max-rate "$MAX_RATE")
elif [ -n "${MAX_RATE_JSON:-}" ]; then
  max=(--max-rate-json "$MAX_RATE_JSON")
else
  echo "== max-rate search first (MAX_RATE or MAX_RATE_JSON skip it)"
  "$bin/harness" max-rate "${system[@]}" \
    --low "${LOW:-4e9}" --high "${HIGH:-8e9}" --resolution "${RESOLUTION:-100e6}" \
    --warmup "${WARMUP:-3}" --settle "${SETTLE:-20}" --window "${WINDOW:-8}" --repeats 1 \
    --out-dir "$out/max-rate" || true
  max=(--max-rate-json "$out/max-rate/max-rate.json")
fi

echo "== soak at ${FRACTION:-0.8} of the max rate for ${DURATION:-1800} s"
"$bin/harness" soak "${system[@]}" "${max[@]}" --fraction "${FRACTION:-0.8}" \
  --duration "${DURATION:-1800}" --interval "${INTERVAL:-60}" --no-content-check \
  --out-dir "$out/soak" "$@"
