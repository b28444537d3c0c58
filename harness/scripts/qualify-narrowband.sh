#!/usr/bin/env bash
# The whole qualification suite on a narrowband output with discard (`nb`) and on a no-discard one
# (`vlbi`, katgpucbf's VLBI mode), each on an engine of its own beside a wideband output, the two
# systems side by side on one host over loopback (no Docker there): WB wideband channels (default
# 32768), NB narrowband (default 8192), D 8, centred at 9/64 of RATE (default 800e6; a mixer word
# with no rounding), the no-discard pass band 0.598 of the band (katgpucbf's qualification case).
#
#   harness/scripts/qualify-narrowband.sh [BIN_DIR [OUT_DIR]]
#
# BACKEND (default cuda), QUICK=--quick and TESTS=a,b (qualify's --tests) let it run smaller on a
# machine without a GPU (BACKEND=cpu RATE=16e6 WB=1024 NB=256). Writes OUT_DIR/{nb,vlbi}/ (each
# with qualify.{html,json}, the logs and the engine's last /status) and OUT_DIR/summary.txt; exits
# 0 when both passed.
set -u
bin=${1:-target/release}
out=${2:-qualify-narrowband}
mkdir -p "$out"
backend=${BACKEND:-cuda} rate=${RATE:-800e6} wb=${WB:-32768} nb=${NB:-8192}
sysctl -q -w net.core.rmem_max=268435456 net.core.wmem_max=268435456 2>/dev/null \
  || echo "could not raise net.core.{r,w}mem_max (not root?)" >&2
centre=$(python3 -c "print(9 * $rate / 64)")
pass=$(python3 -c "print(0.598 * $rate / 16)")

# system NAME EXTRA-NARROWBAND-KEYS FIRST-PORT: engine, dsim, then qualify on output NAME.
system() {
  local name=$1 keys=$2 p=$3 dir="$out/$1"
  mkdir -p "$dir"
  "$bin/fengine" --src-pol0 "127.0.0.1:$p" --src-pol1 "127.0.0.1:$((p + 1))" --taps 16 \
    --spectra-per-heap 256 --adc-sample-rate "$rate" --backend "$backend" \
    --control "127.0.0.1:$((p + 4))" --wideband "wideband:dst=127.0.0.1:$((p + 2)),channels=$wb" \
    --narrowband "$name:dst=127.0.0.1:$((p + 3)),channels=$nb,decimation=8,centre=$centre$keys" \
    > "$dir/fengine.log" 2>&1 &
  local engine=$!
  "$bin/dsim" --pol0-dest "127.0.0.1:$p" --pol1-dest "127.0.0.1:$((p + 1))" --rate "$rate" \
    --control "127.0.0.1:$((p + 5))" --buffer-heaps "${BUFFER:-32768}" > "$dir/dsim.log" 2>&1 &
  local dsim=$!
  local t0=$SECONDS rc=1
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$((p + 4))/status" >/dev/null \
      && curl -sf "http://127.0.0.1:$((p + 5))/status" >/dev/null && rc=0 && break
    sleep 1
  done
  if [ $rc = 0 ]; then
    # shellcheck disable=SC2086 # QUICK is one flag or none
    "$bin/harness" qualify ${QUICK:-} ${TESTS:+--tests "$TESTS"} --output "$name" \
      --out-dir "$dir" --dsim-url "http://127.0.0.1:$((p + 5))" \
      --engine-url "http://127.0.0.1:$((p + 4))" > "$dir/qualify.log" 2>&1
    rc=$?
    curl -s "http://127.0.0.1:$((p + 4))/status" > "$dir/status-end.json"
  fi
  echo "$name: rc=$rc in $((SECONDS - t0)) s" >> "$out/summary.txt"
  kill "$engine" "$dsim" 2>/dev/null
  wait "$engine" "$dsim" 2>/dev/null
  return $rc
}

system nb "" 17100 &
a=$!
system vlbi ",pass_bandwidth=$pass" 17200 &
b=$!
status=0
wait $a || status=1
wait $b || status=1
cat "$out/summary.txt"
exit $status
