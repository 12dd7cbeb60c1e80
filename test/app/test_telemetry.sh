#!/usr/bin/env bash
# Telemetry end to end: while a shunt-perf ping-pong runs, dpdk-telemetry.py
# and a small client of the same socket protocol read its statistics blocks
# and see them move (the perf block, and with SHUNT_TELEMETRY_ONE_WAY=1 the
# endpoint's one-way histogram); shunt-info --live shows them; each of the two processes
# has its own socket; Ctrl-C ends the run and both runtime directories go;
# SHUNT_TELEMETRY=0 serves no socket. Every wait is bounded.
set -uo pipefail
perf=$1 info=$2
fails=0
work=$(mktemp -d)
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
check() { # description, command...
  local d=$1; shift
  if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
if [ "$(nproc)" -lt 2 ]; then
  echo "SKIP: two polling processes need two CPUs"
  exit 77
fi
read -r A B < <(python3 -c 'import os; c=sorted(os.sched_getaffinity(0)); print(c[0], c[1])')
rundir() { # pid -> its DPDK runtime directory, as DPDK computes it
  python3 -c "
import os, sys
base = '/var/run' if os.getuid() == 0 else os.environ.get('XDG_RUNTIME_DIR', '/tmp')
print(os.path.join(base, 'dpdk', 'shunt-' + sys.argv[1]))" "$1"
}
wait_for() { # tries (of 0.1 s), command...
  local n=$1; shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}
running() { # pid: it exists and is not a zombie
  kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}
wait_exit() { # pid, seconds: its exit status; one that outlives them is a failure, killed (137)
  local pid=$1 secs=$2 i gone=0
  # The verdict is the loop's: a second look at /proc could catch the
  # process between states of its exit and call it running.
  for ((i = 0; i < secs * 10; i++)); do
    if ! running "$pid"; then
      gone=1
      break
    fi
    sleep 0.1
  done
  if [ "$gone" = 0 ]; then
    echo "FAIL process $pid still runs $secs s after Ctrl-C: killed"
    fails=$((fails + 1))
    kill -9 "$pid" 2>/dev/null
  fi
  wait "$pid"
}

# ---- a long ping-pong over the shm provider, its connection stamped ----
# (both ends set SHUNT_TELEMETRY_ONE_WAY; they stamp only with an invariant TSC)
stamped=0
grep -qw constant_tsc /proc/cpuinfo && grep -qw nonstop_tsc /proc/cpuinfo && stamped=1
SHUNT_TELEMETRY_ONE_WAY=1 "$perf" pingpong -p shm -S 8 -I 100000000 --cores "$A,$B" --timeout 30 --json >"$work/pp.json" 2>"$work/pp.err" &
launcher=$!; bg+=("$launcher")
sock=$(rundir "$launcher")/dpdk_telemetry.v2
check "the initiator serves a telemetry socket within 10 s" wait_for 100 test -S "$sock"
child=""
wait_for 50 bash -c "pgrep -P $launcher >/dev/null" && child=$(pgrep -P "$launcher" | head -1)
check "the responder has a socket of its own (its own prefix)" \
  bash -c 'test -n "$1" && test "$1" != "$2" && for _ in $(seq 100); do test -S "$3" && exit 0; sleep 0.1; done; exit 1' \
  _ "$child" "$launcher" "$(rundir "${child:-0}")/dpdk_telemetry.v2"
# the timed part has begun when the perf block counts iterations
client() { # commands... : one JSON reply per line, through the socket protocol itself
  python3 - "$sock" "$@" <<'EOF'
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(5)
s.connect(sys.argv[1])
hello = json.loads(s.recv(1024).decode())
assert hello["pid"] > 0 and hello["max_output_len"] >= 1024, hello
for cmd in sys.argv[2:]:
    s.send(cmd.encode())
    print(json.dumps(json.loads(s.recv(hello["max_output_len"]).decode())))
EOF
}
moving() {
  client /shunt/stats,perf >"$work/c1" 2>/dev/null || return 1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['/shunt/stats']; sys.exit(0 if d and d['one_way_count'] > 0 else 1)" "$work/c1"
}
check "the perf block counts round trips within 10 s" wait_for 100 moving
one_way_moves() { # file of vq.one_way block readings, one JSON object a line, in time order
  python3 - "$1" <<'EOF'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert len(r) >= 2 and all(x and x["type"] == "vq.one_way" and x["connections"] >= 1 for x in r), r
n = [x["one_way_count"] for x in r]
assert 0 < n[0] and all(a < b for a, b in zip(n, n[1:])), n
for x in r:
    assert len(x["one_way_le_ns"]) == len(x["one_way_n"]) > 0 and sum(x["one_way_n"]) == x["one_way_count"], x
    assert sorted(x["one_way_le_ns"]) == x["one_way_le_ns"] and x["one_way_max_ns"] >= x["one_way_p50_ns"], x
EOF
}
ow="" # the initiator's endpoint's one-way block
if [ "$stamped" = 1 ]; then
  ow=$(client /shunt/list 2>/dev/null | python3 -c "
import json, re, sys
print(' '.join(n for n in json.loads(sys.stdin.readline())['/shunt/list'] if re.fullmatch(r'vq\.ep\.[0-9]+\.one_way', n)))")
  check "the stamped ping-pong lists one vq.ep.N.one_way block" test -n "$ow" -a "${ow// /}" = "$ow"
else
  echo "skip the one-way block: no invariant TSC (constant_tsc, nonstop_tsc), so no stamps"
fi

client /shunt/info /shunt/list /shunt/stats,perf >"$work/c1"
sleep 0.5
client /shunt/stats,perf /shunt/stats,vq.objects /shunt/stats,fabric.objects /shunt/stats,nosuch >"$work/c2"
check "socket client: info, list and two readings of perf that move" python3 - "$work/c1" "$work/c2" "$launcher" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
info, names, p1 = a[0]["/shunt/info"], a[1]["/shunt/list"], a[2]["/shunt/stats"]
p2, vq, fab, none = (x["/shunt/stats"] for x in b)
assert info["pid"] == int(sys.argv[3]) and info["tsc_hz"] > 0, info
assert {"perf", "vq.objects", "fabric.objects"} <= set(names), names
assert p1["name"] == "perf" and p1["type"] == "perf" and p1["size"] == 8, p1
assert p2["one_way_count"] > p1["one_way_count"], (p1["one_way_count"], p2["one_way_count"])
assert p2["done"] >= p1["done"] and "one_way_p99_ns" in p2 and p2["one_way_max_ns"] >= p2["one_way_p50_ns"] > 0, p2
assert len(p2["one_way_le_ns"]) == len(p2["one_way_n"]) > 0 and sum(p2["one_way_n"]) == p2["one_way_count"], p2
assert sorted(p2["one_way_le_ns"]) == p2["one_way_le_ns"], p2
assert "size" in p2["gauges"] and "size" in p2["bytes"], p2
assert vq["qps"] >= 1 and vq["cqs"] >= 1 and vq["contexts"] >= 1, vq
assert fab["endpoints"] >= 1 and fab["domains"] >= 1, fab
assert none is None
EOF

if command -v dpdk-telemetry.py >/dev/null; then
  printf '/shunt/list\n/shunt/stats,perf\n/shunt/stats,%s\n' "${ow:-perf}" | dpdk-telemetry.py -f "shunt-$launcher" >"$work/d1" 2>&1
  sleep 0.5
  printf '/shunt/stats,perf\n/shunt/stats,%s\n' "${ow:-perf}" | dpdk-telemetry.py -f "shunt-$launcher" >"$work/d2" 2>&1
  check "dpdk-telemetry.py reads the perf block, and it moves" python3 - "$work/d1" "$work/d2" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
b = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
assert "perf" in a[0]["/shunt/list"], a
c1, c2 = a[1]["/shunt/stats"]["one_way_count"], b[0]["/shunt/stats"]["one_way_count"]
assert c2 > c1 > 0, (c1, c2)
EOF
  if [ -n "$ow" ]; then
    python3 -c "
import json, sys
for f in sys.argv[1:]:
    print(json.dumps([json.loads(l) for l in open(f) if l.startswith('{')][-1]['/shunt/stats']))" "$work/d1" "$work/d2" >"$work/ow.d"
    check "dpdk-telemetry.py reads $ow: its count grows, its bins sum to it" one_way_moves "$work/ow.d"
  fi
else
  echo "skip dpdk-telemetry.py (Debian package dpdk-dev) is not installed"
fi

"$info" --live "$launcher" --count 3 --interval 0.3 --json >"$work/live.json" 2>"$work/live.err"; rc=$?
check "shunt-info --live --json: 3 refreshes in which perf moves" python3 - "$work/live.json" "$launcher" "$rc" <<'EOF'
import json, sys
assert sys.argv[3] == "0", sys.argv[3]
r = [json.loads(l) for l in open(sys.argv[1])]
assert [x["refresh"] for x in r] == [1, 2, 3] and all(x["pid"] == int(sys.argv[2]) for x in r), r
assert r[0]["command"] == "shunt-perf", r[0]["command"]
n = [x["blocks"]["perf"]["one_way_count"] for x in r]
assert n[0] < n[1] < n[2], n
assert "vq.objects" in r[0]["blocks"] and "fabric.objects" in r[0]["blocks"]
EOF
if [ -n "$ow" ]; then
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    print(json.dumps(json.loads(l)['blocks'].get(sys.argv[2])))" "$work/live.json" "$ow" >"$work/ow.live"
  check "shunt-info --live --json: $ow in each refresh, its count grows, its bins sum to it" one_way_moves "$work/ow.live"
fi
"$info" --live "$launcher" --count 2 --interval 0.3 >"$work/live.txt" 2>&1; rc=$?
check "shunt-info --live (text): the perf block with rates and the last interval's percentiles" \
  bash -c 'test "$2" -eq 0 && grep -q "^perf (perf)" "$1" && grep -Eq "one_way +total: n [0-9.]+[kM]? +p50 [0-9.]+ (ns|µs)" "$1" &&
           grep -q "last 0.[0-9] s: n " "$1" && grep -Eq "^  done +[0-9]+  \(now\)" "$1"' _ "$work/live.txt" "$rc"

# ---- Ctrl-C: the initiator prints what it measured, both sides exit, both directories go ----
kill -INT "$launcher"
start=$(date +%s)
wait_exit "$launcher" 30; rc=$?
check "Ctrl-C: the initiator exits 130 within 10 s" test $rc -eq 130 -a $(( $(date +%s) - start )) -le 10
check "Ctrl-C: the partial size is printed, marked interrupted" python3 -c "
import json, sys
o = [json.loads(l) for l in open(sys.argv[1])]
assert len(o) == 1 and o[0]['interrupted'] is True and 0 < o[0]['iterations'] < 100000000, o
assert o[0]['one_way_ns']['p50'] > 0" "$work/pp.json"
check "Ctrl-C: the responder stops quietly" bash -c 'grep -q "initiator stopped the run" "$1" && ! grep -q "failed" "$1"' _ "$work/pp.err"
check "Ctrl-C: the responder is gone" wait_for 100 bash -c "! kill -0 ${child:-0} 2>/dev/null || [ \"\$(awk '{print \$3}' /proc/${child:-0}/stat 2>/dev/null)\" = Z ]"
check "both runtime directories are removed" \
  wait_for 50 bash -c "test ! -e '$(rundir "$launcher")' -a ! -e '$(rundir "${child:-0}")'"

# ---- SHUNT_TELEMETRY=0: no socket, no directory ----
SHUNT_TELEMETRY=0 "$perf" pingpong -p shm -S 8 -I 20000000 --cores "$A,$B" --timeout 30 -q >/dev/null 2>&1 &
off=$!; bg+=("$off")
sleep 1.5
check "SHUNT_TELEMETRY=0: no runtime directory while it runs" test ! -e "$(rundir "$off")"
"$info" --live "$off" --count 1 >/dev/null 2>"$work/off.err"; rc=$?
check "SHUNT_TELEMETRY=0: --live says there is no socket" bash -c 'test "$2" -eq 1 && grep -q "no telemetry socket" "$1"' _ "$work/off.err" "$rc"
kill -INT "$off"; wait_exit "$off" 30

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
