#!/usr/bin/env bash
# shunt-fwd: help true to the option table, bad usage, a missing device, and
# a short run between two net_ring ports of its own (no traffic) with the
# JSON summary. Forwarding through real links, with impairments, is tested
# by integration-ethdev-net.
set -uo pipefail
fwd=$1
src=$2 # app/shunt-fwd/options.cpp
fails=0
check() { # description, command...
  local d=$1; shift
  if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
out=$("$fwd" --help); rc=$?
check "--help exits 0" test $rc -eq 0
opts=$(grep -o '{"[a-z-]*", [a-z_]*_argument' "$src" | sed 's/{"\([a-z-]*\)".*/\1/')
check "the option table is found" test -n "$opts"
for o in $opts; do
  check "--help documents --$o" grep -q -- "--$o" <<<"$out"
done
for o in $(grep -o -- '--[a-z][a-z-]*' <<<"$out" | sort -u); do
  case $o in --vdev|--eal) continue;; esac # inside the --eal example
  check "--help's $o is an option" grep -qx -- "${o#--}" <<<"$opts"
done
bad() { # description, args...
  local d=$1; shift
  "$fwd" "$@" >/dev/null 2>&1; local r=$?
  check "$d exits 2" test $r -eq 2
}
bad "no --ports"
bad "one port" -p net_ring0
bad "the same port twice" -p a,a
bad "an unknown mode" -p a,b -m bridge
bad "burst 0" -p a,b -b 0
bad "a probability over 1" -p a,b --drop=1.5
bad "a negative probability" -p a,b --dup=-0.1
bad "an unknown option" -p a,b --frobnicate
bad "a stray argument" -p a,b extra
SHUNT_LOG_LEVEL=error "$fwd" -p no_such0,no_such1 -t 0.1 >/dev/null 2>&1; rc=$?
check "a device that does not exist exits 1" test $rc -eq 1
js=$(SHUNT_ETHDEV_RING_PAIRS=2 SHUNT_LOG_LEVEL=error "$fwd" -p net_ring_pair0b,net_ring_pair1a -t 0.5 -s 0 -j \
       --drop=0.1 --seed=3 2>/dev/null); rc=$?
check "a run between two ring ports exits 0" test $rc -eq 0
for k in '"ports"' '"mode": "io"' '"burst": 32' '"directions"' '"received"' '"sq_full"' '"port_counters"' \
         '"seed": 3' '"send_error": null'; do
  check "the JSON summary has $k" grep -q -- "$k" <<<"$js"
done
st=$(SHUNT_ETHDEV_RING_PAIRS=2 SHUNT_LOG_LEVEL=error "$fwd" -p net_ring_pair0b,net_ring_pair1a -t 0.5 -s 100 \
       -m macswap 2>&1 >/dev/null)
check "live counters on stderr" grep -q 'pps.*drops: impair 0 sq-full 0' <<<"$st"
check "the start line names the ports and the mode" grep -q 'forwarding net_ring_pair0b <-> net_ring_pair1a (macswap' <<<"$st"
echo "$fails failed"
test $fails -eq 0
