#!/usr/bin/env bash
# Side-by-side intra-host small-message latency on this machine, in one run:
# the cache-line floor (median, p99, p99.9), UCX (UCT posix active messages, UCP tag matching) and
# libfabric's shm provider, all pinned to the same two cores. Each figure is a
# one-way latency (half round trip) in nanoseconds; lower is better.
# Usage: devtools/peers.sh [SIZE] [CORE_A] [CORE_B]   (installs ucx-utils, libfabric-bin)
# devtools/perf_figures.sh runs it next to shunt-perf for doc/guides/perf.md.
# The floor is a one-cache-line figure; for SIZE above 64 compare with the UCX and
# libfabric rows (ucx_ucp_tag_cma_ns is UCP with its single-copy CMA path).
set -euo pipefail
size=${1:-8}
core_a=${2:-0}
core_b=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

need=()
command -v ucx_perftest >/dev/null || need+=(ucx-utils)
command -v fi_pingpong >/dev/null || need+=(libfabric-bin)
if ((${#need[@]})); then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi

g++ -O2 -std=c++20 -pthread "$here/cacheline_pingpong.cpp" -o "$work/cacheline"
floor_out=$("$work/cacheline" "$core_a" "$core_b")

ucx_run() {  # $1: extra env, rest: ucx_perftest client args
  local port=$((20000 + RANDOM % 20000))
  env $1 taskset -c "$core_a" ucx_perftest -p "$port" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  env $1 taskset -c "$core_b" ucx_perftest 127.0.0.1 -p "$port" "${@:2}" -s "$size" -n "$iters" 2>/dev/null |
    awk '/^Final:/ {printf "%.0f\n", $3 * 1000}'
  wait "$server" 2>/dev/null || true
}
iters=300000
((size > 8192)) && iters=20000
uct=$(ucx_run UCX_TLS=posix -t am_lat -d memory -x posix)
ucp=$(ucx_run UCX_TLS=posix,self -t tag_lat)
# UCP with cross-memory attach too: its single-copy path for large messages
ucp_cma=$(ucx_run UCX_TLS=posix,cma,self -t tag_lat)

port=$((20000 + RANDOM % 20000))
taskset -c "$core_a" fi_pingpong -p shm -e rdm -B "$port" -I "$iters" -S "$size" >/dev/null 2>&1 &
server=$!
sleep 0.5
ofi=$(taskset -c "$core_b" fi_pingpong -p shm -e rdm -P "$port" -I "$iters" -S "$size" 127.0.0.1 2>/dev/null |
  awk 'NR == 2 {printf "%.0f\n", $7 * 1000}')
wait "$server" 2>/dev/null || true

printf 'size_bytes %s\n' "$size"
printf '%s\n' "$floor_out"
printf 'ucx_uct_posix_am_ns %s\n' "$uct"
printf 'ucx_ucp_tag_ns %s\n' "$ucp"
printf 'ucx_ucp_tag_cma_ns %s\n' "$ucp_cma"
printf 'libfabric_shm_ns %s\n' "$ofi"
