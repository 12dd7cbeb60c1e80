#!/usr/bin/env bash
# The main demo: the same set-up as devtools/test.sh (packages, hugepages,
# build), then a two-process ping-pong sweep over the shm provider (RDM
# endpoints, every power of two from 1 B to 64 KiB, both processes spawned and pinned by shunt-perf)
# printing the one-way latency table and the SVG plot it wrote under build/.
# Bounded: about a minute on a busy 2-CPU machine (RUN_SIZES / RUN_ITERS
# change the sweep; extra arguments go to shunt-perf).
set -euo pipefail
cd "$(dirname "$0")/.."
. devtools/setup.sh
shunt_install_packages
shunt_reserve_hugepages
shunt_build build

# Every power of two from 1 B to 64 KiB; larger messages are fragmented by
# the provider and add little to a latency picture but time.
sizes=${RUN_SIZES:-1,2,4,8,16,32,64,128,256,512,1K,2K,4K,8K,16K,32K,64K}
iters=()
[ -n "${RUN_ITERS:-}" ] && iters=(-I "$RUN_ITERS")
plot=$PWD/build/shunt-perf-shm-pingpong.svg
shunt_log "what this machine offers (build/app/shunt-info -l -D)"
# On stderr: stdout carries only shunt-perf's results (clean for --json).
build/app/shunt-info -l -D >&2
shunt_log "two-process ping-pong over the shm provider: shunt-perf pingpong -p shm -e rdm -S $sizes ${iters[*]}"
# Iterations: 100000 per size up to 8 KiB, fewer above (shunt-perf's
# default); --timeout bounds a stuck run.
timeout 300 build/app/shunt-perf pingpong -p shm -e rdm -S "$sizes" "${iters[@]}" --timeout 20 \
  --plot "$plot" "$@"
shunt_log "plot: $plot"
shunt_log "more: build/app/shunt-perf --help, doc/guides/perf.md (method, JSON shape, figures)"
