#!/bin/bash
# Addressing by node and service between processes (ofi_addr_test.c roles):
# a server started with service S is reached by a client asking for
# (a name of this host, S), for RDM, MSG (passive endpoint) and DGRAM, with
# FI_SOURCE or a service alone, in binary and FI_ADDR_STR form; two servers
# on one host with different services both work, a second server on a
# service in use is refused, a service left by a killed server is taken
# over; node resolution and refusals in one process.
# Usage: addr_test.sh <shunt_probe> <ofi_addr_test> <case>
#   case: rdm | msg | dgram | str | two-servers | resolve
# Exit 77 (skip) only when Shunt itself offers no such endpoint.
set -u
probe=$1
prog=$2
case=$3

ep=$case
case $case in str | two-servers | resolve) ep=rdm ;; esac
"$probe" "$ep"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: shunt_probe $ep failed ($rc)"; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
# Services unique to this run: other tests (and other users' runs) on the
# host must not collide with them.
tag="t$$-$RANDOM"
host=$(hostname)
ip=$(hostname -I 2>/dev/null | awk '{print $1}')
[ -n "$ip" ] || ip=127.0.0.1

fail() {
    echo "FAIL: $*"
    for f in "$tmp"/*.out; do [ -f "$f" ] && { echo "--- $(basename "$f")"; cat "$f"; }; done
    exit 1
}

# start NAME ARGS...: run the program in the background, wait (bounded) for
# READY. The roles bound their own waits (20 s; hold sleeps 60 s), and the
# pid is the program's own, so that kill -9 reaches it.
start() {
    local name=$1
    shift
    "$prog" "$@" >"$tmp/$name.out" 2>&1 &
    local pid=$!
    pids+=("$pid")
    eval "pid_$name=$pid"
    for _ in $(seq 1 400); do
        grep -q READY "$tmp/$name.out" && return 0
        kill -0 "$pid" 2>/dev/null || fail "$name exited before it was ready"
        sleep 0.025
    done
    fail "$name not ready in 10 s"
}

# run NAME ARGS...: run in the foreground, must exit 0.
run() {
    local name=$1
    shift
    timeout 60 "$prog" "$@" >"$tmp/$name.out" 2>&1 || fail "$name: $* exited $?"
}

# finish NAME: the background role must exit 0.
finish() {
    local name=$1 pid
    eval "pid=\$pid_$name"
    wait "$pid" || fail "$name exited $?"
}

case $case in
rdm | msg | dgram)
    # FI_SOURCE server, client by host name; then a server by service alone,
    # client by IP address and by localhost.
    start s1 server "$ep" "$tag-a"
    run c1 client "$ep" "$host" "$tag-a"
    finish s1
    start s2 server "$ep" "$tag-b" svc-only
    run c2 client "$ep" "$ip" "$tag-b"
    finish s2
    start s3 server "$ep" "$tag-c"
    run c3 client "$ep" localhost "$tag-c"
    finish s3
    ;;
str)
    start s1 server rdm "$tag-a" str
    run c1 client rdm 127.0.0.1 "$tag-a" str
    finish s1
    start s2 server msg "$tag-b" str
    run c2 client msg "$host" "$tag-b" str
    finish s2
    ;;
two-servers)
    # Two independent servers on this host, each reached by its service;
    # a third one on a service in use is refused.
    start sa server rdm "$tag-a"
    start sb server rdm "$tag-b"
    run busy busy "$tag-a"
    run cb client rdm localhost "$tag-b"
    run ca client rdm localhost "$tag-a"
    finish sa
    finish sb
    # A server killed while it held a service leaves a stale binding: the
    # next server takes the service over.
    start hold hold "$tag-c"
    kill -9 "$pid_hold"
    wait "$pid_hold" 2>/dev/null
    start sc server rdm "$tag-c"
    run cc client rdm "$host" "$tag-c"
    finish sc
    ;;
resolve)
    run r1 resolve "$tag-none"
    run r2 resolve "$tag-none" str
    ;;
*)
    echo "unknown case $case"
    exit 2
    ;;
esac
cat "$tmp"/*.out
exit 0
