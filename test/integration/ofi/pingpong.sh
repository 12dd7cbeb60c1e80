#!/bin/bash
# fi_pingpong -p shunt between two processes on 127.0.0.1, all sizes, with
# data checks (-c). fi_pingpong exchanges addresses over a TCP control port:
# a free one is picked (and retried if taken in between).
# Usage: pingpong.sh <shunt_probe> <fi_pingpong> <rdm|msg|dgram> [extra fi_pingpong args]
# Exit 77 (skip) only when Shunt itself offers no such endpoint.
# Optional environment (netns_pingpong.sh): PP_SRV_WRAP and PP_CLI_WRAP, the
# command words the server and the client run under (ip netns exec NS env
# VAR=...), PP_SRV_ADDR the server's address (default 127.0.0.1), PP_TIMEOUT
# seconds each side may take (default 240).
set -u
read -r -a srv_wrap <<<"${PP_SRV_WRAP:-}"
read -r -a cli_wrap <<<"${PP_CLI_WRAP:-}"
srv_addr=${PP_SRV_ADDR:-127.0.0.1}
limit=${PP_TIMEOUT:-240}
probe=$1
pingpong=$2
ep=$3
shift 3
extra=("$@")

"${srv_wrap[@]}" "$probe" "$ep"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: shunt_probe $ep failed ($rc)"; exit 1; }

# Pin the two busy-polling processes to different cores when there are two.
pin_srv=() pin_cli=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
    pin_srv=(taskset -c 0)
    pin_cli=(taskset -c 1)
fi

free_port() {
    "${srv_wrap[@]}" python3 -c 'import socket; s=socket.socket(); s.bind(("'"$srv_addr"'", 0)); print(s.getsockname()[1])'
}

# Is TCP port $1 in LISTEN state in the server's network namespace (from
# /proc/net/tcp{,6}; no ss needed)?
listening() {
    local hex
    hex=$(printf '%04X' "$1")
    "${srv_wrap[@]}" cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { found = 1 } END { exit !found }'
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; [ -n "${srv:-}" ] && kill "$srv" 2>/dev/null' EXIT

for attempt in 1 2 3; do
    port=$(free_port)
    "${pin_srv[@]}" "${srv_wrap[@]}" timeout "$limit" "$pingpong" -p shunt -e "$ep" -S all -c -B "$port" "${extra[@]}" \
        >"$tmp/server.out" 2>&1 &
    srv=$!
    # Bounded wait for the server's control socket.
    for _ in $(seq 1 200); do
        listening "$port" && break
        kill -0 "$srv" 2>/dev/null || break
        sleep 0.05
    done
    if listening "$port"; then
        break
    fi
    wait "$srv"
    if grep -q "Address already in use" "$tmp/server.out"; then
        srv=
        continue
    fi
    echo "FAIL: fi_pingpong server did not start:"; cat "$tmp/server.out"; exit 1
done

"${pin_cli[@]}" "${cli_wrap[@]}" timeout "$limit" "$pingpong" -p shunt -e "$ep" -S all -c -P "$port" "${extra[@]}" "$srv_addr" \
    >"$tmp/client.out" 2>&1
crc=$?
wait "$srv"
src=$?
srv=
echo "--- server (exit $src)"; cat "$tmp/server.out"
echo "--- client (exit $crc)"; cat "$tmp/client.out"
[ $crc -eq 124 ] || [ $src -eq 124 ] && { echo "FAIL: fi_pingpong timed out"; exit 1; }
[ $crc -eq 0 ] && [ $src -eq 0 ] || { echo "FAIL: fi_pingpong exited with server $src, client $crc"; exit 1; }
# Figures were reported (a header line and at least one size).
grep -q 'usec/xfer' "$tmp/client.out" || { echo "FAIL: no results from the client"; exit 1; }
# fi_pingpong's own error reports (PP_ERR, PP_PRINTERR, the -c data check).
grep -E '^\[error\]|Error at iteration|, ret=-?[0-9]+ \(' "$tmp/client.out" "$tmp/server.out" &&
    { echo "FAIL: fi_pingpong reported errors"; exit 1; }
exit 0
