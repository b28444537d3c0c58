#!/usr/bin/env bash
# A GPU host's acceptance run of `harness max-rate`: dsim, fengine --backend cuda and the
# harness on one host over loopback (no Docker there), 32768 channels, 16 taps, 10-bit samples,
# 4096-sample input heaps, with the same search on the null backend for comparison. Checks the
# targets: at least 0.9 of the null-backend rate and at least 6.3 Gsample/s per polarisation.
#
#   harness/scripts/gpu-max-rate.sh [BIN_DIR [OUT_DIR [extra harness max-rate arguments]]]
#
# The search's range and timing come from LOW, HIGH, RESOLUTION (sample/s), WARMUP, SETTLE, WINDOW (s)
# and REPEATS in the environment, extra fengine and dsim arguments from FARGS and DARGS;
# INPUT_ADDRESSES (default 4) spreads each polarisation over that many loopback addresses, so that
# the engine receives it with as many threads. BACKEND (default cuda) is the engine's backend and
# COMPARE_NULL=0 leaves out the null backend's search (to run the two searches as separate
# commands where a command's time is limited); REFERENCES=0 skips the two reference benches. With spead's benches in BIN_DIR (spead-loopback and
# spead-chain, as scripts/gpu-checks.sh stages them), two references are measured first and the
# result is set against them: loopback UDP alone, and the chain's transport alone (at CHAIN_RATES,
# Gsample/s per polarisation).
set -euo pipefail
bin=${1:-target/release}
out=${2:-harness-max-rate-gpu}
shift $(( $# < 2 ? $# : 2 ))

# 12+ GB/s through loopback needs socket buffers far above the 4 MiB default (root only).
sysctl -q -w net.core.rmem_max=268435456 net.core.wmem_max=268435456 \
  || echo "could not raise net.core.{r,w}mem_max (not root?): expect loss at high rates" >&2

# The ceiling the result is measured against, in the same run: what loopback UDP alone moves with
# every core sending or receiving dsim-sized datagrams (GSO/GRO) and doing nothing else.
ceiling=""
if [ "${REFERENCES:-1}" != 0 ] && [ -x "$bin/spead-loopback" ]; then
  SPEAD_BENCH_SECS=2 SPEAD_BENCH_PAIRS=$(( ($(nproc) + 1) / 2 )) SPEAD_BENCH_SIZES=5192 \
    "$bin/spead-loopback" --bench > "$out.loopback.txt" 2>&1 || true
  ceiling=$(awk '$1 == 5192 && $2 == "GSO+GRO" {print $7}' "$out.loopback.txt")
  echo "loopback ceiling: ${ceiling:-unknown} GB/s received (see $out.loopback.txt)"
fi

# The chain's transport alone: the same bytes crossing loopback twice (digitiser -> relay -> sink)
# from memory that is not in a cache, with no work in between (spead/benches/chain.rs): the cores
# the kernel's copies alone take at each rate, and the highest rate that bench held.
chain=""
if [ "${REFERENCES:-1}" != 0 ] && [ -x "$bin/spead-chain" ]; then
  SPEAD_CHAIN_RATES=${CHAIN_RATES:-4,4.5,5,5.5,6,6.3} SPEAD_CHAIN_SECS=3 \
    "$bin/spead-chain" --bench > "$out.chain.txt" 2>&1 || true
  chain=$(awk '/^highest rate held: [0-9]/ {print $4}' "$out.chain.txt")
  echo "transport alone held ${chain:-none of the rates} Gsample/s per polarisation (see $out.chain.txt)"
fi

# Both references go into the report and onto the plot's axes (max-rate --reference).
extra=()
if [ -n "$chain" ]; then
  extra+=(--reference "transport alone (chain bench)=${chain}e9")
fi
if [ -n "$ceiling" ]; then
  # Loopback bytes per sample per polarisation, as below.
  extra+=(--reference "loopback UDP ceiling=$(awk -v g="$ceiling" 'BEGIN { printf "%.4g", g * 1e9 / (2 * 1.25 * 5192 / 5120 + 2) }')")
fi

if [ "${COMPARE_NULL:-1}" != 0 ]; then
  extra+=(--compare-null)
fi

status=0
"$bin/harness" max-rate --local --backend "${BACKEND:-cuda}" "${extra[@]}" \
  --dsim-bin "$bin/dsim" --fengine-bin "$bin/fengine" \
  --channels 32768 --taps 16 --spectra-per-heap 256 --sample-bits 10 --substreams "${SUBSTREAMS:-8}" \
  --input-addresses "${INPUT_ADDRESSES:-4}" \
  --fengine-args "--sample-bits 10 --heap-samples 4096 ${FARGS:-}" \
  --dsim-args "--sample-bits 10 --heap-samples 4096 ${DARGS:-}" \
  --low "${LOW:-4e9}" --high "${HIGH:-8e9}" --resolution "${RESOLUTION:-50e6}" \
  --warmup "${WARMUP:-3}" --settle "${SETTLE:-20}" --window "${WINDOW:-10}" --repeats "${REPEATS:-1}" \
  --out-dir "$out" "$@" || status=$?

python3 - "$out/max-rate.json" "$ceiling" "$chain" "$out.chain.txt" <<'PY' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
best = {s["backend"]: s["best"] for s in r["searches"]}
cuda, null, ratio = best.get("cuda"), best.get("null"), r.get("ratio_to_null")
print(f"cuda {cuda} null {null} ratio {ratio}")
if sys.argv[2]:
    # Loopback bytes per sample per polarisation: 10-bit samples in 5192-byte packets of 5120 bytes
    # from dsim to the engine, and 8-bit complex channels (1 byte per real sample) to the harness,
    # both polarisations.
    per_sample = 2 * 1.25 * 5192 / 5120 + 2 * 1.0
    gbps = float(sys.argv[2])
    print(f"loopback ceiling {gbps:.1f} GB/s = {gbps / per_sample:.2f} Gsample/s per polarisation "
          f"for the chain's {per_sample:.2f} bytes per sample, if nothing but the kernel used a core; "
          f"found cuda {(cuda or 0) / 1e9:.2f} = {(cuda or 0) * per_sample / 1e9:.1f} GB/s through loopback")
if sys.argv[3]:
    chain = float(sys.argv[3]) * 1e9
    print(f"transport alone (spead chain bench, same run) held {chain / 1e9:.2f} Gsample/s per "
          f"polarisation; found cuda {(cuda or 0) / chain:.2f} of that")
try:
    for line in open(sys.argv[4]):
        f = line.split()
        if len(f) > 9 and f[0] == "6.30":  # the chain bench's row at the target
            print(f"transport alone at 6.3 Gsample/s: {f[9]} cores busy, {f[6]}% of the input lost")
except (IndexError, OSError):
    pass
ok = cuda is not None and cuda >= 6.3e9 and ratio is not None and ratio >= 0.9
print("targets (>= 6.3 Gsample/s, >= 0.9 of null):", "MET" if ok else "NOT MET")
sys.exit(0 if ok else 1)
PY
exit $status
