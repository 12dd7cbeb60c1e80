#!/usr/bin/env bash
# The figures of doc/guides/perf.md in one run on two cores: the peers
# (cache-line floor, UCX UCT posix AM, UCX UCP tag, libfabric shm:
# devtools/peers.sh),
# right after them shunt-perf pingpong on the shm provider, the vq shm driver
# and the floor transport, the raw vq ping-pong bench, then message rate:
# shunt-perf rate (shm provider, vq) against ucx_perftest -t am_bw over posix.
#   devtools/perf_figures.sh [CORE_A] [CORE_B]   (after a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:-0}
b=${2:-1}
peers=devtools/peers.sh
perf=build/app/shunt-perf
cores="--cores $a,$b"

echo "date $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
bash "$peers" 8 "$a" "$b"
echo "shunt_shm_rdm $($perf pingpong -p shm -e rdm -S 8 -I 1000000 $cores --json)"
echo "shunt_vq_shm_rc $($perf pingpong --vq --driver shm -S 8 -I 1000000 $cores --json)"
echo "shunt_line $($perf pingpong -p line -S 8 -I 1000000 $cores --json)"
echo "vq_pingpong_bench $(build/test/bench/vq-pingpong 8 1000000 "$a" "$b" | tail -1)"
echo "shunt_shm_rdm_rate $($perf rate -p shm -e rdm -S 8 -I 10000000 $cores --json)"
echo "shunt_vq_shm_rate $($perf rate --vq --driver shm -S 8 -I 10000000 $cores --json)"
port=$((20000 + RANDOM % 20000))
UCX_TLS=posix taskset -c "$a" ucx_perftest -p "$port" >/dev/null 2>&1 &
server=$!
sleep 0.5
# Final: iterations, latency typical/avg/overall (us), MB/s avg/overall, msg/s avg/overall
ucx=$(UCX_TLS=posix taskset -c "$b" ucx_perftest 127.0.0.1 -p "$port" -t am_bw -d memory -x posix -s 8 \
  -n 10000000 2>/dev/null | awk '/^Final:/ {printf "%.3f\n", $9 / 1e6}')
wait "$server" 2>/dev/null || true
echo "ucx_am_bw_posix_Mmps $ucx"
echo "load_after $(cut -d' ' -f1-3 /proc/loadavg)"
