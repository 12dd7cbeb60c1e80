#!/usr/bin/env bash
# Side-by-side small-message rate on this machine, in one run: UCX UCT posix
# active messages (am_bw) and UCP tag matching (tag_bw), one sender and one
# receiver pinned to two cores. Prints million messages per second; higher is
# better. Compare with `shunt-perf rate` run in the same minute.
# Usage: devtools/peers-rate.sh [SIZE] [CORE_A] [CORE_B] [COUNT]   (installs ucx-utils)
set -euo pipefail
size=${1:-8}
core_a=${2:-0}
core_b=${3:-1}
count=${4:-2000000}
command -v ucx_perftest >/dev/null ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q ucx-utils >/dev/null

ucx_rate() {  # $1: extra env, rest: ucx_perftest client args; prints Mmsg/s
  local port=$((20000 + RANDOM % 20000))
  env $1 taskset -c "$core_a" ucx_perftest -p "$port" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  env $1 taskset -c "$core_b" ucx_perftest 127.0.0.1 -p "$port" "${@:2}" -s "$size" -n "$count" 2>/dev/null |
    awk '/^Final:/ {printf "%.2f\n", $NF / 1e6}'
  wait "$server" 2>/dev/null || true
}
printf 'size_bytes %s\n' "$size"
printf 'ucx_uct_posix_am_bw_mmsgs %s\n' "$(ucx_rate UCX_TLS=posix -t am_bw -d memory -x posix)"
printf 'ucx_ucp_tag_bw_mmsgs %s\n' "$(ucx_rate UCX_TLS=posix,self -t tag_bw)"
