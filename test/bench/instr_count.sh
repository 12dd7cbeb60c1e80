#!/usr/bin/env bash
# Instructions per operation of the endpoint's small send and receive and of
# the vq calls under them, counted by callgrind (load-independent).
#   test/bench/instr_count.sh BUILD_DIR
# BUILD_DIR must be built with a -march valgrind decodes (for example
# meson setup build-cg -Dcpp_args=-march=x86-64-v2 -Dc_args=-march=x86-64-v2).
# Prints one line per phase: name, instructions per call (the cost of the
# collection toggles, phase "empty", subtracted).
set -euo pipefail
# Under valgrind DPDK's EAL cannot reserve its hugepage address space; the
# counts do not depend on hugepages (SHUNT_HUGEPAGES=off unless set).
export SHUNT_HUGEPAGES=${SHUNT_HUGEPAGES:-off}
bin=${1:?usage: instr_count.sh BUILD_DIR}/test/bench/instr-count
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out/cg" "$bin" >"$out/phases" 2>"$out/log" ||
  { cat "$out/log" >&2; exit 1; }
# Each dump is one file cg.N: its trigger names the phase, "totals:" its Ir.
declare -A ir
for f in "$out"/cg.*; do
  name=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
  tot=$(awk '/^totals:/ {print $2}' "$f")
  [ -n "$name" ] && ir[$name]=${tot:-0}
done
empty=0
while read -r _ name n; do
  [ "$name" = empty ] && empty=$(( ${ir[empty]:-0} / n ))
done <"$out/phases"
while read -r _ name n; do
  [ "$name" = empty ] && continue
  awk -v t="${ir[$name]:-0}" -v n="$n" -v e="$empty" -v name="$name" \
    'BEGIN { printf "%-28s %8.1f\n", name, t / n - e }'
done <"$out/phases"
