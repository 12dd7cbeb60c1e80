#!/usr/bin/env bash
# The ethdev figures of doc/guides/perf.md in one run, each next to its
# comparison, on two cores (A, B; default 0 and 1). Makes and removes its own
# network namespaces, veth pairs and memif socket. Needs root, iproute2,
# dpdk-testpmd (Debian's dpdk) and fi_pingpong (libfabric-bin).
#  (a) forwarding: shunt-fwd io mode against dpdk-testpmd --forward-mode=io,
#      the same net_af_packet ports and forwarding core (B); a testpmd txonly
#      generator on A sends 64-byte frames into the first port, and the
#      forwarded rate is read from the kernel counters of the veth behind
#      the second port over a window after a warm-up: the same measurement
#      for both forwarders.
#  (b) the endpoint over a veth pair between two namespaces (net_af_xdp
#      when the kernel allows it, else net_af_packet): fi_pingpong RDM 8 B
#      one-way latency and 64 KiB pingpong bandwidth, -p shunt against
#      -p tcp and -p "udp;ofi_rxd" over the same veth and addresses; on
#      net_af_xdp 64 KiB once more with the veth at MTU 3500 (shunt, tcp).
#  (c) the endpoint over net_memif between two processes against the shm
#      provider, shunt-perf pingpong RDM 8 B, the same cores; beside it,
#      for where the time goes, the queue level (vq-pingpong, RC 8 B) and
#      the PMD alone (pmd-pingpong, 64-byte frames) over the same memif.
#  (d) UD TSO: bench-ethdev UdTso64K against UdMssSends64K (CPU time).
# Prints one line per figure and a table with the ratios and their targets,
# and the load average before and after (figures from a loaded machine say
# nothing). --smoke: tiny iteration counts and windows, to check that every
# figure is produced (the ratios are then meaningless); exit 1 when a figure
# is missing, 77 when it cannot run here (not root, no ip).
#   devtools/ethdev_figures.sh [--smoke] [--build DIR] [CORE_A CORE_B]
# DIR is a build directory (default build/) with shunt-fwd, shunt-perf,
# the libfabric module and, for (d), bench-ethdev (-Dbenchmarks=true).
set -uo pipefail
cd "$(dirname "$0")/.."
smoke=0
build=build
cores=()
while [ $# -gt 0 ]; do
    case $1 in
    --smoke) smoke=1 ;;
    --build) build=$2; shift ;;
    --build=*) build=${1#--build=} ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "ethdev_figures.sh: unknown option $1" >&2; exit 2 ;;
    *) cores+=("$1") ;;
    esac
    shift
done
a=${cores[0]:-0}
b=${cores[1]:-1}
fwd=$build/app/shunt-fwd
perf=$build/app/shunt-perf
bench=$build/test/bench/bench-ethdev
vqpp=$build/test/bench/vq-pingpong
pmdpp=$build/test/bench/pmd-pingpong
ofi_dir=$build/lib/ofi/module

if [ "$smoke" = 1 ]; then
    warm=0.2 window=0.5 pp_small=200 pp_big=20 perf_iter=2000 bench_time=0.01
else
    warm=2 window=10 pp_small=100000 pp_big=5000 perf_iter=1000000 bench_time=1
fi
# Bounds on every wait: nothing here may hang.
limit=$((smoke ? 30 : 300))

[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: needs ip (iproute2)"; exit 77; }
for f in "$fwd" "$perf"; do
    [ -x "$f" ] || { echo "ethdev_figures.sh: $f not built" >&2; exit 1; }
done

tag=$$
ns_f=shunt-fig-f-$tag ns_a=shunt-fig-a-$tag ns_b=shunt-fig-b-$tag
tmp=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    for n in "$ns_f" "$ns_a" "$ns_b"; do ip netns del "$n" 2>/dev/null; done # the veths go with them
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

missing=0
declare -A fig
put() { # key value (empty: missing)
    if [[ $2 =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then
        fig[$1]=$2
    else
        echo "MISSING $1${3:+: $3}"
        missing=$((missing + 1))
    fi
}
note() { printf '%s\n' "$*"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# testpmd with its EAL arguments: its own file prefix, no hugepages taken
# beyond what its pool needs (dynamic memory), no PCI.
testpmd_eal() { echo "--no-pci --in-memory --file-prefix=shunt-fig-$1-$tag --log-level=lib.eal:error"; }

# Is TCP port $2 listening in namespace $1 ("" = this one)? (/proc/net/tcp)
listening() {
    local hex
    hex=$(printf '%04X' "$2")
    ${1:+ip netns exec "$1"} cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { found = 1 } END { exit !found }'
}
wait_listening() { # ns port pid
    local i
    for i in $(seq 1 $((limit * 20))); do
        listening "$1" "$2" && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
rx_packets() { # ns ifname: the interface's received packets (/proc/net/dev)
    ip netns exec "$1" cat /proc/net/dev | awk -v i="$2:" '$1 == i { print $2 }'
}

smoke_note=
[ "$smoke" = 1 ] && smoke_note=" (smoke run: tiny counts, these are not figures)"
note "ethdev figures: date $(date -u +%FT%TZ) load $(load) cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
    "cores $a,$b$smoke_note"

# ---------------------------------------------------------------- (a)
# ns_f: g0 <-> f0 (generator -> forwarder), f1 <-> g1 (forwarder -> sink).
wait_for() { # file pattern pid: bounded wait for a line of a starting process
    local i
    for i in $(seq 1 $((limit * 20))); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
fwd_rate() { # label ready-pattern forwarder-command-words...: forwarded frames per second
    local label=$1 ready=$2
    shift 2
    local gen r0 r1 out=$tmp/fwd-$label.out
    ip netns exec "$ns_f" timeout $limit "$@" >"$out" 2>&1 &
    local fpid=$!
    pids+=("$fpid")
    # The forwarder's ports up before the generator starts.
    wait_for "$out" "$ready" "$fpid" || { echo "  $label did not start:" >&2; tail -n 15 "$out" >&2; return; }
    ip netns exec "$ns_f" timeout $limit stdbuf -oL dpdk-testpmd $(testpmd_eal gen) -l "$a,$b" --main-lcore "$b" \
        --vdev=net_af_packet0,iface=g0,qpairs=1,qdisc_bypass=1 -- --forward-mode=txonly --txpkts=64 \
        --burst=32 --nb-cores=1 --total-num-mbufs=8192 --stats-period 3600 >"$tmp/gen-$label.out" 2>&1 &
    gen=$!
    pids+=("$gen")
    # The generator sending, then the warm-up, then the window.
    wait_for "$tmp/gen-$label.out" 'packet forwarding' "$gen" ||
        { echo "  the generator did not start:" >&2; tail -n 15 "$tmp/gen-$label.out" >&2; }
    # Forwarded frames reaching the sink (a thousand: more than the few
    # frames the kernel sends by itself when links come up), bounded.
    local i base
    base=$(rx_packets "$ns_f" g1)
    for i in $(seq 1 $((limit * 20))); do
        [ "$(rx_packets "$ns_f" g1)" -gt $((${base:-0} + 1000)) ] 2>/dev/null && break
        kill -0 "$gen" 2>/dev/null && kill -0 "$fpid" 2>/dev/null || break
        sleep 0.05
    done
    sleep "$warm"
    r0=$(rx_packets "$ns_f" g1)
    sleep "$window"
    r1=$(rx_packets "$ns_f" g1)
    kill -INT "$gen" "$fpid" 2>/dev/null
    echo "  $label: the sink's rx_packets $r0 -> $r1 in ${window}s" >&2
    wait "$gen" "$fpid" 2>/dev/null
    if [ -z "$r0" ] || [ -z "$r1" ] || [ "$r1" -le "$r0" ]; then
        echo "  $label forwarded nothing; its output and the generator's:" >&2
        tail -n 15 "$out" "$tmp/gen-$label.out" >&2
        return
    fi
    awk -v d=$((r1 - r0)) -v w="$window" 'BEGIN { printf "%.0f\n", d / w }'
}
if command -v dpdk-testpmd >/dev/null; then
    ip netns add "$ns_f" && ip -n "$ns_f" link set lo up &&
        ip -n "$ns_f" link add g0 type veth peer name f0 && ip -n "$ns_f" link add f1 type veth peer name g1 &&
        ip -n "$ns_f" link set g0 up && ip -n "$ns_f" link set f0 up &&
        ip -n "$ns_f" link set f1 up && ip -n "$ns_f" link set g1 up ||
        { echo "cannot set up the forwarding namespace"; exit 1; }
    vdevs="--vdev=net_af_packet0,iface=f0,qpairs=1,qdisc_bypass=1 --vdev=net_af_packet1,iface=f1,qpairs=1,qdisc_bypass=1"
    s=$(fwd_rate shunt-fwd 'shunt-fwd: forwarding' env SHUNT_LOG_LEVEL=error "$fwd" -p net_af_packet0,net_af_packet1 -m io -b 32 -c "$b" \
        -s 0 -j --eal="$vdevs")
    t=$(fwd_rate testpmd 'packet forwarding' stdbuf -oL dpdk-testpmd $(testpmd_eal fwd) -l "$a,$b" --main-lcore "$a" $vdevs -- \
        --forward-mode=io --burst=32 --nb-cores=1 --total-num-mbufs=8192 --stats-period 3600)
    put fwd_shunt "$s" "shunt-fwd io"
    put fwd_testpmd "$t" "dpdk-testpmd io"
    note "fwd_io_pps_per_core shunt-fwd ${s:-none} testpmd ${t:-none} (net_af_packet, 64 B, forwarding core $b, generator core $a)"
else
    put fwd_shunt "" "dpdk-testpmd not installed (Debian's dpdk)"
fi

# ---------------------------------------------------------------- (b)
# fga/fgb carry the traffic measured; fca/fcb fi_pingpong's out-of-band
# TCP connection when the endpoint runs on net_af_xdp (its XDP program
# takes every frame of the data veth from the kernel).
addr_a=10.214.0.1 addr_b=10.214.0.2 ctl_a=10.215.0.1 ctl_b=10.215.0.2
ip netns add "$ns_a" && ip netns add "$ns_b" && ip link add fga$tag type veth peer name fgb$tag &&
    ip link set fga$tag netns "$ns_a" && ip link set fgb$tag netns "$ns_b" &&
    ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
    ip -n "$ns_a" addr add $addr_a/24 dev fga$tag && ip -n "$ns_b" addr add $addr_b/24 dev fgb$tag &&
    ip -n "$ns_a" link set fga$tag up && ip -n "$ns_b" link set fgb$tag up &&
    ip link add fca$tag type veth peer name fcb$tag &&
    ip link set fca$tag netns "$ns_a" && ip link set fcb$tag netns "$ns_b" &&
    ip -n "$ns_a" addr add $ctl_a/24 dev fca$tag && ip -n "$ns_b" addr add $ctl_b/24 dev fcb$tag &&
    ip -n "$ns_a" link set fca$tag up && ip -n "$ns_b" link set fcb$tag up ||
    { echo "cannot set up the veth namespaces"; exit 1; }
# net_af_xdp where the kernel lets it bind to the veth, else net_af_packet.
pmd=af_xdp
vdev() { # pmd iface
    if [ "$1" = af_xdp ]; then
        echo "--vdev=net_af_xdp0,iface=$2,start_queue=0,queue_count=1,force_copy=1"
    else
        echo "--vdev=net_af_packet0,iface=$2,qpairs=1,qdisc_bypass=1"
    fi
}
if ! ip netns exec "$ns_a" env SHUNT_LOG_LEVEL=error SHUNT_EAL_ARGS="$(vdev af_xdp fga$tag)" \
    timeout 20 "$build/app/shunt-info" -D 2>/dev/null | grep -q net_af_xdp0; then
    pmd=af_packet
fi
dom=net_${pmd}0
note "veth figures over $dom (fga$tag <-> fgb$tag)"

# fi_pingpong SIZE ITERATIONS PROVIDER [env words]: one-way usec and MB/s.
pingpong() {
    local size=$1 iters=$2 prov=$3 port
    shift 3
    local dom_args=() srv_addr=$addr_a
    [ "$prov" = shunt ] && dom_args=(-d "$dom") srv_addr=$ctl_a
    port=$((20000 + RANDOM % 20000))
    ip netns exec "$ns_a" env FI_PROVIDER_PATH="$ofi_dir" SHUNT_LOG_LEVEL=error SHUNT_EAL_ARGS="$(vdev $pmd fga$tag)" \
        taskset -c "$a" timeout $limit fi_pingpong -p "$prov" -e rdm "${dom_args[@]}" -S "$size" -I "$iters" \
        -B "$port" >"$tmp/pp-srv.out" 2>&1 &
    local srv=$!
    pids+=("$srv")
    if ! wait_listening "$ns_a" "$port" "$srv"; then
        echo "  fi_pingpong -p $prov server did not start:" >&2
        tail -n 5 "$tmp/pp-srv.out" >&2
        kill "$srv" 2>/dev/null
        return
    fi
    ip netns exec "$ns_b" env FI_PROVIDER_PATH="$ofi_dir" SHUNT_LOG_LEVEL=error SHUNT_EAL_ARGS="$(vdev $pmd fgb$tag)" \
        taskset -c "$b" timeout $limit fi_pingpong -p "$prov" -e rdm "${dom_args[@]}" -S "$size" -I "$iters" \
        -P "$port" "$srv_addr" >"$tmp/pp-cli.out" 2>&1
    local rc=$?
    wait "$srv"
    # bytes iters total time MB/sec usec/xfer Mxfers/sec
    local line
    line=$(awk '$1 ~ /^[0-9]/ && NF >= 7 { print $(NF - 2), $(NF - 1) }' "$tmp/pp-cli.out" | tail -1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        echo "  fi_pingpong -p $prov -S $size failed (exit $rc):" >&2
        tail -n 5 "$tmp/pp-cli.out" "$tmp/pp-srv.out" >&2
        return
    fi
    echo "$line"
}
if command -v fi_pingpong >/dev/null; then
    for prov in shunt tcp "udp;ofi_rxd"; do
        key=${prov%%;*}
        r=$(pingpong 8 $pp_small "$prov")
        put "lat_$key" "${r#* }" "fi_pingpong -p $prov 8 B"
        # No figure needs udp;ofi_rxd's bandwidth: measured, not checked, and
        # left out of smoke runs.
        if [ "$key" != udp ]; then
            r=$(pingpong 65536 $pp_big "$prov")
            put "bw_$key" "${r% *}" "fi_pingpong -p $prov 64 KiB"
        elif [ "$smoke" = 0 ]; then
            r=$(pingpong 65536 $pp_big "$prov")
            fig[bw_udp]=${r% *}
        fi
        note "fi_pingpong_rdm -p $prov: 8 B one-way ${fig[lat_$key]:-none} us, 64 KiB ${fig[bw_$key]:-none} MB/s"
    done
    # 64 KiB again with the veth at MTU 3500, which net_af_xdp takes (the
    # port follows the interface's MTU): 2048-byte RoCE packets instead of
    # 1024. tcp over the same veth beside it. Not on net_af_packet, which
    # keeps 1500 there.
    if [ "$pmd" = af_xdp ] && ip -n "$ns_a" link set fga$tag mtu 3500 && ip -n "$ns_b" link set fgb$tag mtu 3500; then
        for prov in shunt tcp; do
            r=$(pingpong 65536 $pp_big "$prov")
            put "bwj_$prov" "${r% *}" "fi_pingpong -p $prov 64 KiB, veth MTU 3500"
        done
        note "fi_pingpong_rdm 64 KiB, veth MTU 3500: shunt ${fig[bwj_shunt]:-none} MB/s, tcp ${fig[bwj_tcp]:-none} MB/s"
    fi
else
    put lat_shunt "" "fi_pingpong not installed (libfabric-bin)"
fi

# ---------------------------------------------------------------- (c)
# shunt-perf prints the one-way latency's median (p50, ns) in its JSON.
p50() { sed -n 's/.*"one_way_ns":{[^}]*"p50":\([0-9.]*\).*/\1/p' | tail -1; }
sock=/run/shunt-fig-memif-$tag.sock
port=$((20000 + RANDOM % 20000))
SHUNT_LOG_LEVEL=error SHUNT_EAL_ARGS="--vdev=net_memif0,role=server,id=0,socket=$sock" \
    timeout $limit "$perf" pingpong -s -q -p vq -e rdm --domain net_memif0 -c "$a" -P "$port" 127.0.0.1 \
    >"$tmp/memif-srv.out" 2>&1 &
srv=$!
pids+=("$srv")
m=
if wait_listening "" "$port" "$srv"; then
    m=$(SHUNT_LOG_LEVEL=error SHUNT_EAL_ARGS="--vdev=net_memif0,role=client,id=0,socket=$sock" \
        timeout $limit "$perf" pingpong -q -p vq -e rdm --domain net_memif0 -c "$b" -P "$port" -S 8 \
        -I $perf_iter --timeout 20 --json 127.0.0.1 2>"$tmp/memif-cli.err" | p50)
fi
wait "$srv" 2>/dev/null
[ -n "$m" ] || tail -n 5 "$tmp/memif-srv.out" "$tmp/memif-cli.err" >&2
rm -f "$sock"
sh=$(SHUNT_LOG_LEVEL=error timeout $limit "$perf" pingpong -q -p shm -e rdm -S 8 -I $perf_iter --cores "$a,$b" \
    --json | p50)
put memif "$m" "shunt-perf over net_memif0"
put shm "$sh" "shunt-perf -p shm"
note "shunt_perf_rdm_8B_one_way_p50_ns memif ${m:-none} shm ${sh:-none}"
# The layers under that figure, over the same memif (not targets).
vq_memif= pmd_memif=
if [ -x "$vqpp" ]; then
    vq_memif=$(SHUNT_LOG_LEVEL=error SHUNT_PINGPONG_DEVICE=net_memif0 \
        SHUNT_EAL_ARGS="--vdev=net_memif0,role=server,id=0,socket=$sock" \
        SHUNT_PINGPONG_CHILD_EAL_ARGS="--vdev=net_memif0,role=client,id=0,socket=$sock" \
        timeout $limit "$vqpp" 8 $perf_iter "$a" "$b" 2>"$tmp/vqpp.err" | awk '/^one_way_ns/ { print $3 }')
    [ -n "$vq_memif" ] || tail -n 3 "$tmp/vqpp.err" >&2
    rm -f "$sock"
fi
if [ -x "$pmdpp" ]; then
    eal="--no-huge --no-pci -m 512 --log-level=error --vdev=net_memif0,id=0,socket=$sock"
    timeout $limit "$pmdpp" server -l "$a" --file-prefix pps$tag $eal,role=server -- 64 $perf_iter \
        >"$tmp/pmdpp-srv.out" 2>&1 &
    pids+=("$!")
    sleep 1
    pmd_memif=$(timeout $limit "$pmdpp" client -l "$b" --file-prefix ppc$tag $eal,role=client -- 64 $perf_iter \
        2>"$tmp/pmdpp.err" | awk '/^one_way_ns/ { print $3 }')
    wait "${pids[-1]}" 2>/dev/null
    [ -n "$pmd_memif" ] || tail -n 3 "$tmp/pmdpp-srv.out" "$tmp/pmdpp.err" >&2
    rm -f "$sock"
fi
note "memif_layers_8B_one_way_p50_ns vq_rc ${vq_memif:-none} pmd_alone ${pmd_memif:-none}"

# ---------------------------------------------------------------- (d)
if [ -x "$bench" ]; then
    # cpu_time of each benchmark, in its time unit (both are the same one).
    out=$(taskset -c "$a" timeout $limit "$bench" --benchmark_filter='^(UdTso64K|UdMssSends64K)$' \
        --benchmark_min_time=$bench_time --benchmark_format=csv 2>/dev/null)
    tso=$(awk -F, '$1 == "\"UdTso64K\"" { print $4 }' <<<"$out")
    mss=$(awk -F, '$1 == "\"UdMssSends64K\"" { print $4 }' <<<"$out")
    put tso "$tso" "bench-ethdev UdTso64K"
    put mss "$mss" "bench-ethdev UdMssSends64K"
    note "ud_tso_64K_cpu tso ${tso:-none} mss_sends ${mss:-none} ($(awk -F, '$1 == "\"UdTso64K\"" { print $5 }' <<<"$out"))"
else
    put tso "" "$bench not built (-Dbenchmarks=true)"
fi

# ---------------------------------------------------------------- table
ratio() { # key_num key_den
    [ -n "${fig[$1]:-}" ] && [ -n "${fig[$2]:-}" ] || { echo "-"; return; }
    awk -v n="${fig[$1]}" -v d="${fig[$2]}" 'BEGIN { if (d > 0) printf "%.2f\n", n / d; else print "-" }'
}
row() { # description num den op target
    local r
    r=$(ratio "$2" "$3")
    local v=-
    if [ "$r" != - ]; then
        v=$(awk -v r="$r" -v t="$5" -v op="$4" 'BEGIN { ok = op == "<=" ? r <= t : r >= t; print ok ? "meets" : "misses" }')
    fi
    printf '%-44s %12s %12s %7s %4s %-4s %s\n' "$1" "${fig[$2]:--}" "${fig[$3]:--}" "$r" "$4" "$5" "$v"
}
echo
printf '%-44s %12s %12s %7s %9s %s\n' figure shunt reference ratio target verdict
row "fwd io pps/core vs testpmd io (af_packet)" fwd_shunt fwd_testpmd ">=" 0.95
row "RDM 8 B one-way us vs tcp ($pmd)" lat_shunt lat_tcp "<=" 0.5
row "RDM 8 B one-way us vs udp;ofi_rxd ($pmd)" lat_shunt lat_udp "<=" 0.5
row "RDM 64 KiB MB/s vs tcp ($pmd)" bw_shunt bw_tcp ">=" 1.5
[ "$pmd" = af_xdp ] && row "RDM 64 KiB MB/s vs tcp, veth MTU 3500" bwj_shunt bwj_tcp ">=" 1.5
row "RDM 8 B one-way ns, memif vs shm" memif shm "<=" 3
row "UD TSO 64 KiB CPU vs MSS sends" tso mss "<=" 0.7
echo "load_after $(load)$smoke_note"
if [ $missing -gt 0 ]; then
    echo "$missing figure(s) missing"
    exit 1
fi
exit 0
