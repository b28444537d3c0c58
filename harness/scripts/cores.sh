#!/usr/bin/env bash
# Where the cores go, per thread group, for one or more builds at fixed rates: for each BINDIR and
# RATE, a 32 s `harness watch --local` (32768 channels, 10-bit, 4096-sample heaps, 8 substreams,
# 4 input addresses), sampled over seconds 16-26: CPU per thread group of dsim, fengine and the
# harness, their voluntary context switches (wakeups), host busy and steal, the kernel's UDP drops
# and the engine's loss counters by reason. Linux, root for the socket buffer limits.
#
#   harness/scripts/cores.sh OUT LABEL:BINDIR [LABEL:BINDIR...] -- RATE [RATE...]
#
# BACKEND (default null), HARGS (extra harness watch arguments), FARGS and DARGS (extra fengine and dsim arguments, e.g.
# FARGS="--recv-threads 4 --send-threads 8" DARGS="--threads 4", the thread counts a max-rate
# search with --high 8e9 gets) come from the environment.
set -u
OUT=$1; shift; mkdir -p "$OUT"
sets=(); while [ "$1" != "--" ]; do sets+=("$1"); shift; done; shift
rates=("$@")
sysctl -q -w net.core.rmem_max=268435456 net.core.wmem_max=268435456 || echo "could not raise the socket buffer limits (not root?)" >&2
sample() {
  for name in fengine dsim harness; do
    for pid in $(pgrep -x $name); do
      for t in /proc/$pid/task/*; do
        awk -v n=$name '{c=$2; gsub(/[()]/,"",c); gsub(/[0-9.]+$/,"",c); print n, c, $14+$15}' $t/stat 2>/dev/null
      done
      echo "$name wakeups $(cat /proc/$pid/task/*/status 2>/dev/null | awk '/^voluntary_ctxt/{s+=$2} END{print s}')"
    done
  done
  head -1 /proc/stat | awk '{print "host busy", $2+$3+$4+$7+$8; print "host steal", $9}'
  awk 'NR>1{d+=$NF} END{print "count kernel-udp-drops", d}' /proc/net/udp
  # Packets the kernel dropped before any socket saw them: a CPU's input backlog was full
  # (net.core.netdev_max_backlog); loopback traffic is queued there too.
  local n=0 _ dropped; while read -r _ dropped _; do n=$((n + 16#$dropped)); done < /proc/net/softnet_stat
  echo "count softnet-backlog-drops $n"
  port=$(grep -aho "control listening on 127.0.0.1:[0-9]*" $(ls -t $LOGDIR/fengine-*.log | head -1) 2>/dev/null | head -1 | sed 's/.*://')
  [ -n "$port" ] && python3 - $port <<'PY'
import urllib.request, re, sys
try:
    t = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=2).read().decode()
except Exception:
    t = ""
for line in t.splitlines():
    m = re.match(r"fengine_(input_rejected_packets_total|input_missing_heaps_total|input_resyncs_total|output_skipped_heaps_total|queue_depth)\{([^}]*)\} (\S+)", line)
    if m:
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        labels.pop("backend", None); labels.pop("substream", None)
        print("count", m.group(1) + ":" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())), m.group(3))
PY
}
diffs() { # a b secs
  awk -v T=$3 -v H=$(getconf CLK_TCK) 'NR==FNR{a[$1" "$2]+=$3; next} {b[$1" "$2]+=$3} END{for(k in b){d=b[k]-a[k]; if(k ~ /wakeups/) printf "  %-22s %8.0f /s\n", k, d/T; else if(k ~ /^count/) {if(d!=0 || k ~ /queue/) printf "  %-40s %12.0f (then %.0f)\n", k, d, b[k]} else printf "  %-22s %6.2f cores\n", k, d/H/T}}' $1 $2 | sort
}
for s in "${sets[@]}"; do
  label=${s%%:*}; bin=${s#*:}
  for r in "${rates[@]}"; do
    tag=$label-${BACKEND:-null}-$r
    LOGDIR=$OUT/logs-$tag; rm -rf $LOGDIR
    $bin/harness watch --local --backend ${BACKEND:-null} --no-content-check --dsim-bin $bin/dsim --fengine-bin $bin/fengine \
      --channels 32768 --taps 16 --spectra-per-heap 256 --sample-bits 10 --substreams 8 --input-addresses 4 --adc-rate $r \
      --fengine-args "--sample-bits 10 --heap-samples 4096 ${FARGS:-}" --dsim-args "--sample-bits 10 --heap-samples 4096 ${DARGS:-}" \
      ${HARGS:-} --duration 32 --json $OUT/$tag.json --log-dir $OUT/logs-$tag > $OUT/$tag.log 2>&1 &
    w=$!
    sleep 16; sample > $OUT/.a; sleep 10; sample > $OUT/.b
    wait $w
    echo "== $tag  (window 16-26 s; gaps line at ~16 and ~26 s)"
    grep -E '^\[ *(1[5-7]|2[5-7])\.' $OUT/$tag.log | cut -c1-110
    diffs $OUT/.a $OUT/.b 10
  done
done
