#!/usr/bin/env bash
# Starts katgpucbf's fgpu (the kit's patched build) on loopback, fed by this repository's dsim in
# its katgpucbf form, for the harness to qualify over katcp.
#
#   scripts/fgpukit/run-fgpu.sh [CHANNELS]        32768 (default) or 4096, any power of two fgpu takes
#
# fgpu: katcp on 127.0.0.1:7148; input from the 16 groups 239.10.0.0+15:7148 (pol 0 the first 8,
# pol 1 the last 8); one wideband output "wideband" of CHANNELS channels to 239.10.1.0+15:7148,
# jones_per_batch = max(2^20, 32 x CHANNELS) (fgpu needs at least 32 spectra a heap at 65536).
# dsim: katcp on 127.0.0.1:7150, HTTP API on port 7151, sending both polarisations at ADC_RATE on lo.
# Both run until this script is stopped (Ctrl-C, or SIGTERM to its pid); stopping it stops both.
#
# Environment (defaults):
#   ADC_RATE=214000000      ADC samples/s of each polarisation (fgpu and dsim)
#   SYNC_TIME=now           Unix time of timestamp 0, one value for both
#   SIGNALS='cw(0.2, 50e6) + wgn(0.05);'  dsim's signal (katgpucbf's language; the harness may
#                           change it over katcp with ?signals)
#   SRC=239.10.0.0+15:7148  DST=239.10.1.0+15:7148   KATCP_PORT=7148   DSIM_KATCP_PORT=7150
#   PROMETHEUS_PORT=7149    fgpu's --prometheus-port (the harness reads fgpu's counters there:
#                           --engine-metrics-url http://127.0.0.1:7149/metrics); empty: none
#   DSIM_HTTP_PORT=7151     dsim's --prometheus-port: its HTTP API (qualify changes the signal
#                           through it: --dsim-url http://127.0.0.1:7151); empty: loopback, free port
#   DSIM=<repo>/gpu-stage/dsim   this repository's dsim binary (scripts/gpu-checks.sh stage)
#   NO_DSIM=1               start fgpu only (feed it from elsewhere)
#   FGPU_ARGS=, DSIM_ARGS=  more flags for either
#   CHECK_ONLY=1            set up lo, then only parse fgpu's line (fgpu's own argparse) and
#                           run dsim until it has sent for CHECK_SECONDS (2); no GPU work
#   LOG_DIR=/tmp/fgpukit-run  dsim's log (fgpu logs to this terminal)
set -uo pipefail
kit=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$kit")

channels=${1:-${CHANNELS:-32768}}
[[ $channels =~ ^[0-9]+$ ]] || { echo "run-fgpu: CHANNELS must be a whole number, not '$channels'" >&2; exit 2; }
adc_rate=${ADC_RATE:-214000000}
sync_time=${SYNC_TIME:-$(date +%s)}
signals=${SIGNALS:-'cw(0.2, 50e6) + wgn(0.05);'}
src=${SRC:-239.10.0.0+15:7148}
# dsim sends pol 0 to the first half of fgpu's groups, pol 1 to the second.
dsim_dest=${DSIM_DEST:-239.10.0.0+7:7148 239.10.0.8+7:7148}
dst=${DST:-239.10.1.0+15:7148}
katcp_port=${KATCP_PORT:-7148}
dsim_katcp_port=${DSIM_KATCP_PORT:-7150}
prometheus_port=${PROMETHEUS_PORT-7149}
dsim_http_port=${DSIM_HTTP_PORT-7151}
dsim=${DSIM:-$repo/gpu-stage/dsim}
log_dir=${LOG_DIR:-/tmp/fgpukit-run}
jones_per_batch=$((channels * 32 > 1048576 ? channels * 32 : 1048576))
mkdir -p "$log_dir"

# Multicast on loopback: lo must carry multicast, and groups sent without a chosen interface
# must route to lo (dsim and fgpu both name lo, so the route is a safety net).
if [[ ${SETUP_LO:-1} == 1 ]]; then
  if command -v ip >/dev/null; then
    ip link set lo multicast on || { echo "run-fgpu: cannot turn multicast on for lo (root needed)" >&2; exit 1; }
    ip route replace 239.0.0.0/8 dev lo || { echo "run-fgpu: cannot route 239.0.0.0/8 to lo" >&2; exit 1; }
  else
    # A host without iproute2 (the GPU host has none): lo's IFF_MULTICAST flag through the
    # SIOCGIFFLAGS/SIOCSIFFLAGS ioctls; no route, as both programs name lo.
    python3 -c '
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
f = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0)))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", f | 0x1000))' ||
      { echo "run-fgpu: cannot turn multicast on for lo (root needed)" >&2; exit 1; }
  fi
  # fgpu asks for a 128 MiB receive buffer a socket; the kernel caps it at rmem_max.
  # (sysctl may exit 0 having set nothing, in a network namespace: read the value back.)
  for k in rmem_max wmem_max; do
    [[ $(sysctl -n net.core.$k 2>/dev/null || echo 0) -ge 268435456 ]] || sysctl -qw net.core.$k=268435456 2>/dev/null
    [[ $(sysctl -n net.core.$k 2>/dev/null || echo 0) -ge 268435456 ]] ||
      echo "run-fgpu: net.core.$k stays at $(sysctl -n net.core.$k 2>/dev/null) (socket buffers capped there; heaps may be lost)" >&2
  done
fi

[[ ${CHECK_ONLY:-0} == 1 ]] && export HOST_ENV_WARN_ONLY=1
# shellcheck source=host-env.sh
source "$kit/host-env.sh" || exit 1

fgpu_line=(
  --recv-interface lo --send-interface lo
  --adc-sample-rate "$adc_rate" --sync-time "$sync_time"
  --katcp-host 127.0.0.1 --katcp-port "$katcp_port"
  --send-ttl 1
  --wideband "name=wideband,channels=$channels,jones_per_batch=$jones_per_batch,dst=$dst"
)
[[ -n $prometheus_port ]] && fgpu_line+=(--prometheus-port "$prometheus_port")
# shellcheck disable=SC2206
fgpu_line+=(${FGPU_ARGS:-} "$src")

# shellcheck disable=SC2206
dsim_line=(
  --adc-sample-rate "$adc_rate" --sync-time "$sync_time" --interface lo --ttl 1
  --katcp-host 127.0.0.1 --katcp-port "$dsim_katcp_port" --signals "$signals"
)
[[ -n $dsim_http_port ]] && dsim_line+=(--prometheus-port "$dsim_http_port")
# shellcheck disable=SC2206
dsim_line+=(${DSIM_ARGS:-} $dsim_dest)

dsim_pid=
fgpu_pid=
# Stops what this script started, fgpu first (SIGINT: its own orderly shutdown).
stop() {
  if [[ -n $fgpu_pid ]]; then kill -INT "$fgpu_pid" 2>/dev/null; wait "$fgpu_pid" 2>/dev/null; fgpu_pid=; fi
  if [[ -n $dsim_pid ]]; then kill "$dsim_pid" 2>/dev/null; wait "$dsim_pid" 2>/dev/null; dsim_pid=; fi
}
trap stop EXIT
trap 'exit 143' TERM INT

start_dsim() {
  [[ -x $dsim ]] || { echo "run-fgpu: $dsim is missing (scripts/gpu-checks.sh stage puts it in gpu-stage/; or set DSIM)" >&2; exit 1; }
  echo "run-fgpu: $dsim ${dsim_line[*]} (log $log_dir/dsim.log)"
  "$dsim" "${dsim_line[@]}" >"$log_dir/dsim.log" 2>&1 &
  dsim_pid=$!
}

if [[ ${CHECK_ONLY:-0} == 1 ]]; then
  echo "run-fgpu: checking fgpu's line with fgpu's own parser: fgpu ${fgpu_line[*]}"
  "$PYTHON" -c 'import sys; from katgpucbf.fgpu.main import parse_args; a = parse_args(sys.argv[1:]); print("fgpu accepts it:", a.wideband, a.src)' "${fgpu_line[@]}" || exit 1
  if [[ ${NO_DSIM:-0} != 1 ]]; then
    start_dsim
    # dsim builds its signal buffers first (seconds, at the default --period 2^27): wait until it
    # says it is sending, let it send CHECK_SECONDS, stop it, and require heaps sent.
    for _ in $(seq 120); do
      grep -q 'sending rate=' "$log_dir/dsim.log" && break
      kill -0 "$dsim_pid" 2>/dev/null || break
      sleep 0.5
    done
    sleep "${CHECK_SECONDS:-2}"
    if ! kill -0 "$dsim_pid" 2>/dev/null; then
      echo "run-fgpu: dsim exited early:" >&2; tail -20 "$log_dir/dsim.log" >&2; exit 1
    fi
    stop
    tail -n 30 "$log_dir/dsim.log"
    sent=$(grep -o 'heaps_sent=[0-9]*' "$log_dir/dsim.log" | tail -1 | cut -d= -f2)
    [[ ${sent:-0} -gt 0 ]] || { echo "run-fgpu: dsim sent no heap" >&2; exit 1; }
    echo "run-fgpu: dsim sent $sent heaps in the check"
  fi
  exit 0
fi

[[ ${NO_DSIM:-0} == 1 ]] || start_dsim
echo "run-fgpu: fgpu ${fgpu_line[*]}"
echo "run-fgpu: katcp on 127.0.0.1:$katcp_port once fgpu has compiled its kernels"
"$PYTHON" -m katgpucbf.fgpu.main "${fgpu_line[@]}" &
fgpu_pid=$!
wait "$fgpu_pid"
rc=$?
fgpu_pid=
echo "run-fgpu: fgpu exited with status $rc" >&2
exit "$rc"
