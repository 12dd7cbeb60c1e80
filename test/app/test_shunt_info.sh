#!/usr/bin/env bash
# shunt-info: help, version, default output, topology, env listing, bad usage.
set -uo pipefail
info=$1
fails=0
check() { # description, command...
  local d=$1; shift
  if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
out=$("$info" --help); rc=$?
check "--help exits 0" test $rc -eq 0
for opt in --topology --hugepages --env --version --help; do
  check "--help documents $opt" grep -q -- "$opt" <<<"$out"
done
check "-V prints the version" bash -c "'$info' -V | grep -Eq '^shunt-info [0-9]+\.[0-9]+\.[0-9]+$'"
all=$("$info"); rc=$?
check "default run exits 0" test $rc -eq 0
check "default shows drivers" grep -q '^drivers:' <<<"$all"
check "default shows providers" grep -q '^providers:' <<<"$all"
check "default shows hugepages" grep -q '^hugepages:' <<<"$all"
ncpu=$(nproc --all)
check "topology counts $ncpu hardware threads" grep -q "topology: $ncpu hardware threads" <<<"$all"
topo=$("$info" -t)
check "topology lists NUMA node 0" grep -q 'NUMA node 0' <<<"$topo"
check "topology lists an L3 group" grep -q 'L3 group 0' <<<"$topo"
envs=$("$info" --env)
for v in SHUNT_LCORES SHUNT_HUGEPAGES SHUNT_LOG_LEVEL SHUNT_MEMORY_MB SHUNT_EAL_ARGS; do
  check "--env lists $v" grep -q "^$v " <<<"$envs"
done
set_out=$(SHUNT_LCORES=0 "$info" --env)
check "--env shows a set value" grep -q 'SHUNT_LCORES.*\[set: 0\]' <<<"$set_out"
"$info" --no-such-option >/dev/null 2>&1; rc=$?
check "unknown option exits 2" test $rc -eq 2
"$info" extra >/dev/null 2>&1; rc=$?
check "stray argument exits 2" test $rc -eq 2
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
