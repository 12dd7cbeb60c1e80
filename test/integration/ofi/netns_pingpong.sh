#!/bin/bash
# fi_pingpong -p shunt over the ethdev driver between two network namespaces
# joined by a veth pair that this script creates and removes: each side's
# net_af_packet0 port sits on its veth end; fi_pingpong's control connection
# (TCP) runs over the same veth through the kernel's addresses. Every size
# is checked byte for byte (-c) by pingpong.sh, each side bounded in time.
# Optionally the same pair runs shunt-perf's endpoint pingpong (--verify).
# Usage: netns_pingpong.sh <shunt_probe> <fi_pingpong> <rdm|msg|dgram> <sizes>
#            [<shunt-perf>]
#   sizes: a comma list of fi_pingpong -S arguments (a size or 'all')
# Exit 77 (skip) without root or iproute2, or when Shunt offers no such
# endpoint.
set -u
probe=$1
pingpong=$2
ep=$3
sizes=$4
perf=${5:-}
here=$(cd "$(dirname "$0")" && pwd)

[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: needs ip (iproute2)"; exit 77; }

tag=$$
na=shunt-pp-a-$tag nb=shunt-pp-b-$tag
va=sppa$tag vb=sppb$tag # interface names: at most 15 characters
addr_a=10.213.0.1 addr_b=10.213.0.2
cleanup() {
    ip netns del "$na" 2>/dev/null
    ip netns del "$nb" 2>/dev/null # the veth pair goes with its namespaces
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

ip netns add "$na" && ip netns add "$nb" || fail "cannot create network namespaces"
ip link add "$va" type veth peer name "$vb" || fail "cannot create a veth pair"
ip link set "$va" netns "$na" && ip link set "$vb" netns "$nb" || fail "cannot move the veth ends"
for x in "$na $va $addr_a" "$nb $vb $addr_b"; do
    set -- $x
    ip -n "$1" link set lo up && ip -n "$1" addr add "$3/24" dev "$2" && ip -n "$1" link set "$2" up ||
        fail "cannot configure $2 in $1"
done

eal() { echo "SHUNT_EAL_ARGS=--vdev=net_af_packet0,iface=$1,qpairs=1,qdisc_bypass=1"; }
export PP_SRV_WRAP="ip netns exec $na env $(eal "$va")"
export PP_CLI_WRAP="ip netns exec $nb env $(eal "$vb")"
export PP_SRV_ADDR=$addr_a
export PP_TIMEOUT=${PP_TIMEOUT:-120}

IFS=, read -r -a list <<<"$sizes"
for s in "${list[@]}"; do
    echo "=== fi_pingpong -e $ep -S $s over net_af_packet0 ($va <-> $vb)"
    "$here/pingpong.sh" "$probe" "$pingpong" "$ep" -d net_af_packet0 -S "$s" -I 10
    rc=$?
    [ $rc -eq 0 ] || exit $rc
done

if [ -n "$perf" ]; then
    # shunt-perf's endpoint pingpong over the same ports, every byte checked.
    echo "=== shunt-perf pingpong -e $ep --domain net_af_packet0 --verify"
    # fi_pingpong above took the large sizes; here one small and one of a
    # path MTU's packets (a datagram each on DGRAM), 200 round trips each.
    psizes=8,4K
    [ "$ep" = dgram ] && psizes=8,512 # within the port's path MTU
    port=47600
    perf_out=$(mktemp)
    $PP_SRV_WRAP timeout "$PP_TIMEOUT" "$perf" pingpong -s -q -p vq -e "$ep" --domain net_af_packet0 \
        -P "$port" "$addr_a" >"$perf_out" 2>&1 &
    srv=$!
    $PP_CLI_WRAP timeout "$PP_TIMEOUT" "$perf" pingpong -q -p vq -e "$ep" --domain net_af_packet0 \
        -P "$port" -S "$psizes" -I 200 -w 10 --verify --timeout 20 --json "$addr_a"
    crc=$?
    wait "$srv"
    src=$?
    echo "--- shunt-perf server (exit $src)"
    cat "$perf_out"
    rm -f "$perf_out"
    [ $crc -eq 0 ] && [ $src -eq 0 ] || fail "shunt-perf pingpong exited with server $src, client $crc"
fi
exit 0
