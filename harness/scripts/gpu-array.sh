#!/usr/bin/env bash
# The multi-engine table on a GPU host (paper: four engines sharing one GPU): `harness
# max-rate --engines N` for every engine count and channel count, the null backend beside each,
# the transport alone (spead's chain bench) in the same run; dsims, engines and the harness on
# one host over loopback (no Docker there), 16 taps, 10-bit samples, 4096-sample input heaps,
# 256 spectra per output heap.
#
#   harness/scripts/gpu-array.sh [BIN_DIR [OUT_DIR]]
#
# Writes OUT_DIR/array.md (the table: engines, per-engine rate, aggregate, ratio to null, cores
# busy, and the references), OUT_DIR/array.json (the same and every search's best, bounds and
# cores), and per search OUT_DIR/c<CHANNELS>-n<ENGINES>-<BACKEND>/ (max-rate.{txt,json,svg},
# the harness's log, the children's logs). Progress (each search, each trial, the time used) on
# stderr.
#
# Environment (defaults are sized for one H100 host with 16 cores, the whole table in about
# 9 minutes; the script prints its estimate first):
#   ENGINES="1 2 4"           engine counts (searched in this order)
#   CHANNELS_LIST="32768 8192"
#   BACKEND=cuda              the engine's backend (cpu for a small run on a machine without GPU)
#   NULL=1                    the same search with the null backend beside each (0: none)
#   GPUS=                     deal the engines out to G GPUs, engine i on GPU i mod G (empty: all
#                             on GPU 0)
#   LOW=1e9 HIGH=7e9 RESOLUTION=0.75e9
#                             one engine's search, sample/s per polarisation (and every search's
#                             when the one engine did not pass LOW), divided by N for N engines
#   SPAN="0.5 1.5" RES_FRACTION=0.125
#                             N > 1 engines search an aggregate of SPAN x (one engine's best, same
#                             backend and channels) to RES_FRACTION x that best: each engine from
#                             0.5 B1/N to 1.5 B1/N, resolution B1/(8N)
#   WARMUP=1 SETTLE=3 WINDOW=3 REPEATS=0 RATE_TOLERANCE=0.02
#                             each trial: warm-up, settling (at most), window (s); boundary repeats
#   DEADLINE=540              no search starts that would end later than this (s from the start,
#                             by the mean search so far): the run ends, table written, before a
#                             10-minute limit; the searches left out are named, and a second run
#                             into the same OUT_DIR (CHANNELS_LIST=8192 CHAIN=0, say) adds them
#   SUBSTREAMS=8 INPUT_ADDRESSES=4
#                             output substreams (shared by the engines); loopback addresses per
#                             polarisation of each antenna (as many engine receive threads)
#   CHAIN_RATES=2,3,4,5,6     the chain bench's rates (Gsample/s per polarisation); CHAIN=0 skips it
#   FARGS, DARGS              extra fengine and dsim arguments
#   TABLE_ONLY=1              no searches: the table of the searches already in OUT_DIR (after
#                             copying two runs' c*-n*-* folders into one, say)
#
# A small run of the plumbing on a machine without a GPU (2 cores):
#   BACKEND=cpu CHANNELS_LIST=1024 ENGINES="1 2" LOW=4e6 HIGH=24e6 RESOLUTION=4e6 SUBSTREAMS=4 \
#     INPUT_ADDRESSES=1 FARGS="--heaps-per-frame 1" CHAIN_RATES=0.01,0.02 \
#     harness/scripts/gpu-array.sh BIN_DIR out
# (one heap per frame: at a few Msample/s the default four-heap frames come a second apart, too
# coarse for a 3 s window.)
set -euo pipefail
bin=${1:-target/release}
out=${2:-harness-gpu-array}
mkdir -p "$out"
out=$(cd "$out" && pwd)

engines_list=${ENGINES:-1 2 4}
channels_list=${CHANNELS_LIST:-32768 8192}
backend=${BACKEND:-cuda}
null=${NULL:-1}
gpus=${GPUS:-}
low=${LOW:-1e9} high=${HIGH:-7e9} resolution=${RESOLUTION:-0.75e9}
read -r span_lo span_hi <<<"${SPAN:-0.5 1.5}"
res_fraction=${RES_FRACTION:-0.125}
warmup=${WARMUP:-1} settle=${SETTLE:-3} window=${WINDOW:-3} repeats=${REPEATS:-0}
rate_tolerance=${RATE_TOLERANCE:-0.02}
deadline=${DEADLINE:-540}
substreams=${SUBSTREAMS:-8} input_addresses=${INPUT_ADDRESSES:-4}

table_only=${TABLE_ONLY:-0}
backends=("$backend")
[[ $null == 1 && $backend != null ]] && backends+=(null)
for n in $engines_list; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "gpu-array: ENGINES holds '$n', not an engine count of at least 1" >&2; exit 2; }
done
[[ -z $gpus || $gpus =~ ^[1-9][0-9]*$ ]] || { echo "gpu-array: GPUS must be a GPU count of at least 1, not '$gpus'" >&2; exit 2; }
for b in dsim fengine harness; do
  [[ $table_only == 1 ]] || [[ -x $bin/$b ]] || { echo "gpu-array: $bin/$b is missing (scripts/gpu-checks.sh stage puts it in gpu-stage/)" >&2; exit 2; }
done

# The table over every search in OUT so far: rewritten after each search, so that a run cut short
# still leaves one (and a second run into the same OUT adds its rows).
table_py=$(cat <<'PY'
import json, os, re, sys

out, backend, gpus, final = sys.argv[1:]
# Every search in OUT, this run's and an earlier run's into the same folder (a table split over
# two runs, say one per channel count).
found = set()
for d in os.listdir(out):
    m = re.fullmatch(r"c(\d+)-n(\d+)-(\w+)", d)
    if m and m.group(3) in (backend, "null"):
        found.add((int(m.group(1)), int(m.group(2))))
channels_list = sorted({c for c, _ in found}, reverse=True)
engines_list = sorted({n for _, n in found})

def search(b, c, n):
    try:
        r = json.load(open(f"{out}/c{c}-n{n}-{b}/max-rate.json"))
    except (OSError, ValueError):
        return None
    s = r["searches"][0] if r.get("searches") else None
    if s is None:
        return None
    best = s.get("best")
    # The cores of the best rate's last passing trial.
    at = [t for t in s["trials"] if t["pass"] and best is not None and t["rate"] == best]
    cores = at[-1]["cores"] if at else {}
    # The largest GPU memory any engine process had during the search (MiB, from nvidia-smi).
    gpu_mib = None
    try:
        for line in open(f"{out}/c{c}-n{n}-{b}/gpu-memory.txt"):
            f = [x.strip() for x in line.split(",")]
            if len(f) == 3 and "fengine" in f[1] and f[2].isdigit():
                gpu_mib = max(gpu_mib or 0, int(f[2]))
    except OSError:
        pass
    return {
        "backend": b, "channels": c, "engines": n, "best": best, "gpu_mib_per_engine": gpu_mib,
        "aggregate": best * n if best else None,
        "lowest_fail": s.get("lowest_fail"), "low": s["config"]["low"], "high": s["config"]["high"],
        "resolution": s["config"]["resolution"], "trials": len(s["trials"]),
        "host_busy": cores.get("host_busy"), "host_cores": cores.get("host_cores"),
        "by_process": cores.get("by_process", {}),
    }

def cell(s, aggregate=False):
    """A search's best in Gsample/s (per engine, or times the engines): >= when its highest rate
    passed, < its lowest when that failed."""
    if s is None:
        return "not run"
    k = s["engines"] if aggregate else 1
    g = lambda x: f"{x / 1e9:.2f}" if x >= 0.995e9 else f"{x / 1e9:.3g}"
    if s["best"] is None:
        return f"< {g(s['low'] * k)}"
    return ("≥ " if s["lowest_fail"] is None else "") + g(s["best"] * k)

def ratio_text(row):
    r, bound = row["ratio_to_null"], row["ratio_bound"]
    if r is None or bound == "?":
        return "-"
    return (bound + " " if bound else "") + f"{r:.2f}"

chain = None
try:
    text = open(f"{out}/chain.txt").read()
    m = re.search(r"^highest rate held: ([0-9.]+)", text, re.M)
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) > 15 and re.fullmatch(r"[0-9.]+", f[0]) and f[-1] in ("yes", "no"):
            rows[f[0]] = {"held": f[-1] == "yes", "host_busy": f[9]}
    chain = {"highest_held": float(m.group(1)) * 1e9 if m else None, "rates": rows}
except OSError:
    pass

searches, table = [], []
for c in channels_list:
    for n in engines_list:
        if (c, n) not in found:
            continue
        s = search(backend, c, n)
        z = search("null", c, n) if backend != "null" else None
        searches += [x for x in (s, z) if x]
        ratio = (s["best"] / z["best"]) if s and z and s["best"] and z["best"] else None
        # A best whose search passed its highest rate is a lower bound: so is the ratio then,
        # or an upper one when it is the null backend's; both at once bound nothing.
        bound = None
        if ratio is not None:
            lower, upper = s["lowest_fail"] is None, z["lowest_fail"] is None
            bound = {(True, False): "≥", (False, True): "≤", (True, True): "?"}.get((lower, upper))
        table.append({"channels": c, "engines": n, "backend": s, "null": z,
                      "ratio_to_null": ratio, "ratio_bound": bound})

lines = [
    f"Engines sharing {'one GPU' if not gpus else f'{gpus} GPUs (engine i on GPU i mod {gpus})'}: "
    f"`harness max-rate --engines N` ({backend} backend; every dsim at the trial's rate, a trial "
    "passes when every engine passed). Rates in Gsample/s per polarisation; ≥: the search's "
    "highest rate passed.",
    "",
    f"| channels | engines | per engine | aggregate | null: per engine | null: aggregate | ratio to null | cores busy | GPU MiB per engine |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
]
for row in table:
    s, z = row["backend"], row["null"]
    busy = (f"{s['host_busy']:.1f} of {s['host_cores']}" if s and s["host_busy"] is not None else "-")
    nul = (lambda agg: cell(z, agg)) if backend != "null" else (lambda agg: "-")
    lines.append(
        f"| {row['channels']} | {row['engines']} | {cell(s)} | {cell(s, True)} | {nul(False)} | "
        f"{nul(True)} | {ratio_text(row)} | {busy} | "
        f"{(s or {}).get('gpu_mib_per_engine') or '-'} |"
    )
lines.append("")
if chain and chain["highest_held"]:
    busy = ", ".join(f"{r} Gsample/s: {v['host_busy']} cores" for r, v in chain["rates"].items())
    lines.append(f"Transport alone (spead's chain bench beside these searches, one chain): held "
                 f"{chain['highest_held'] / 1e9:.2f} Gsample/s per polarisation; cores busy at {busy}.")
elif chain:
    lines.append("Transport alone (spead's chain bench beside these searches): none of its rates was held.")
else:
    lines.append("Transport alone: not measured (no spead-chain bench, or CHAIN=0).")
try:
    host = [l.strip() for l in open(f"{out}/host.txt") if l.strip()]
    gpus_seen = [l[5:] for l in host if l.startswith("gpu: ")]
    cores = [l[7:] for l in host if l.startswith("cores: ")]
    lines.append("Host: " + ("; ".join(gpus_seen) if gpus_seen else "no GPU seen by nvidia-smi")
                 + (f"; {cores[0]} CPU cores." if cores else "."))
except OSError:
    pass
lines.append(f"Cores busy: the whole host, kernel included, over the window of the best rate's "
             f"trial. GPU MiB per engine: the largest any engine process held (nvidia-smi, context "
             f"included). Each search's trials: {out}/c<channels>-n<engines>-<backend>/max-rate.txt.")
text = "\n".join(lines) + "\n"
open(f"{out}/array.md", "w").write(text)
json.dump({"backend": backend, "gpus": int(gpus) if gpus else None, "chain": chain,
           "table": table, "searches": searches}, open(f"{out}/array.json", "w"), indent=1)
if final == "final":
    print(text, end="")
    print(f"wrote {out}/array.md and {out}/array.json", file=sys.stderr)
PY
)
write_table() { python3 -c "$table_py" "$out" "$backend" "${gpus:-}" "${1:-}"; }
if [[ $table_only == 1 ]]; then
  write_table final
  exit 0
fi

# The host, for the table's caption: its GPUs and cores.
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    | sed 's/^/gpu: /' || true
  echo "cores: $(nproc)"
} >"$out/host.txt"

# 12+ GB/s through loopback needs socket buffers far above the 4 MiB default (root only).
sysctl -q -w net.core.rmem_max=268435456 net.core.wmem_max=268435456 2>/dev/null \
  || echo "gpu-array: could not raise net.core.{r,w}mem_max (not root?): expect loss at high rates" >&2

searches=0
for _ in $channels_list; do for _ in $engines_list; do searches=$((searches + ${#backends[@]})); done; done
per_search=$(python3 - "$searches" "$low" "$high" "$resolution" "$warmup" "$settle" "$window" "$repeats" "$deadline" <<'PY'
import math, sys
n, low, high, res, warmup, settle, window, repeats, deadline = map(float, sys.argv[1:])
trials = 2 + math.ceil(math.log2(max((high - low) / res, 1))) + repeats
# A passing trial settles in about 1.3 s, a failing one runs the settling out; about 12 s to
# start and stop each search's processes.
per = trials * (warmup + window + (1.3 + settle) / 2) + 12
print(f"gpu-array: {int(n)} searches of about {int(trials)} trials: about {n * per / 60:.1f} minutes "
      f"(plus the chain bench), each trial {warmup:g} s warm-up, up to {settle:g} s settling, "
      f"{window:g} s window; no search starts that would end past {deadline:g} s", file=sys.stderr)
print(int(per))
PY
)
t0=$SECONDS
sampler=
# The GPU-memory sampler is this script's own child: stop it however the script ends.
trap '[[ -n $sampler ]] && kill "$sampler" 2>/dev/null; true' EXIT
elapsed() { printf '%d:%02d' $(((SECONDS - t0) / 60)) $(((SECONDS - t0) % 60)); }

# The chain's transport alone, in the same run: the same bytes crossing loopback twice with no
# work in between (spead/benches/chain.rs); one chain, at CHAIN_RATES.
if [[ ${CHAIN:-1} != 0 && -x $bin/spead-chain ]]; then
  echo "[$(elapsed)] transport alone: spead chain bench at ${CHAIN_RATES:-2,3,4,5,6} Gsample/s per polarisation" >&2
  SPEAD_CHAIN_RATES=${CHAIN_RATES:-2,3,4,5,6} SPEAD_CHAIN_SECS=2 \
    "$bin/spead-chain" --bench >"$out/chain.txt" 2>&1 || true
  grep -E '^highest rate held' "$out/chain.txt" | sed "s/^/[$(elapsed)] transport alone: /" >&2 || true
else
  # A run that adds rows to an earlier one's folder keeps that run's measurement.
  echo "[$(elapsed)] transport alone: not measured now (no $bin/spead-chain, or CHAIN=0)$([[ -f $out/chain.txt ]] && echo "; $out/chain.txt from an earlier run stays")" >&2
fi


# best BACKEND CHANNELS ENGINES: a finished search's best rate per engine, or nothing.
best() {
  python3 -c 'import json, sys
try:
    b = json.load(open(sys.argv[1]))["searches"][0]["best"]
    print(b if b else "")
except (OSError, ValueError, KeyError, IndexError):
    pass' "$out/c$2-n$3-$1/max-rate.json"
}

k=0 spent=0 done_searches=0
for channels in $channels_list; do
  for n in $engines_list; do
    for b in "${backends[@]}"; do
      k=$((k + 1))
      dir=$out/c$channels-n$n-$b
      # The next search takes about as long as the mean so far (the estimate before any).
      expect=$(( done_searches > 0 ? spent / done_searches : per_search ))
      if (( SECONDS - t0 + expect > deadline )); then
        echo "[$(elapsed)] search $k of $searches ($channels channels, $n engine(s), $b): skipped, it would end past DEADLINE=$deadline s" >&2
        continue
      fi
      mkdir -p "$dir"
      started=$SECONDS
      b1=$(best "$b" "$channels" 1)
      # Per engine: around the one engine's best shared N ways, else the fixed range over N.
      read -r lo hi res < <(python3 -c 'import sys
n, b1, lo, hi, res, slo, shi, frac = sys.argv[1:]
n = int(n)
if n > 1 and b1:
    b1 = float(b1)
    print(float(slo) * b1 / n, float(shi) * b1 / n, float(frac) * b1 / n)
else:
    print(float(lo) / n, float(hi) / n, float(res) / n)' "$n" "$b1" "$low" "$high" "$resolution" "$span_lo" "$span_hi" "$res_fraction")
      echo "[$(elapsed)] search $k of $searches: $channels channels, $n engine(s), $b backend${gpus:+, over $gpus GPUs}: $(python3 -c "import sys; print(' to '.join(f'{float(x) / 1e9:.3f}' for x in sys.argv[1:3]), 'Gsample/s per engine, resolution', f'{float(sys.argv[3]) / 1e6:.0f}', 'Msample/s')" "$lo" "$hi" "$res")" >&2
      # Each process's GPU memory, every 5 s while the search runs (the engines' own, context
      # included): what N engines take of one GPU, beside the figure computed in the README.
      sampler=
      if [[ $b != null ]] && command -v nvidia-smi >/dev/null; then
        (while sleep 5; do
           nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits
         done) >"$dir/gpu-memory.txt" 2>/dev/null &
        sampler=$!
      fi
      status=0
      "$bin/harness" max-rate --local --engines "$n" ${gpus:+--gpus "$gpus"} --backend "$b" \
        --dsim-bin "$bin/dsim" --fengine-bin "$bin/fengine" \
        --channels "$channels" --taps 16 --spectra-per-heap 256 --sample-bits 10 \
        --substreams "$substreams" --input-addresses "$input_addresses" \
        --fengine-args "--sample-bits 10 --heap-samples 4096 ${FARGS:-}" \
        --dsim-args "--sample-bits 10 --heap-samples 4096 ${DARGS:-}" \
        --low "$lo" --high "$hi" --resolution "$res" --warmup "$warmup" --settle "$settle" \
        --window "$window" --repeats "$repeats" --rate-tolerance "$rate_tolerance" \
        --out-dir "$dir" >"$dir/stdout.txt" 2> >(tee "$dir/harness.log" \
          | grep --line-buffered -E '^(trial |harness:)|highest sustained' \
          | sed -u "s/^/    /" >&2) || status=$?
      [[ -n $sampler ]] && kill "$sampler" 2>/dev/null
      sampler=
      # Let the filter above finish its lines before the next heading.
      sleep 0.2
      [[ $status == 0 || $status == 1 ]] \
        || echo "[$(elapsed)] search $k: harness exited $status (see $dir/harness.log)" >&2
      spent=$((spent + SECONDS - started)) done_searches=$((done_searches + 1))
      write_table
    done
  done
done

write_table final
echo "[$(elapsed)] done" >&2
