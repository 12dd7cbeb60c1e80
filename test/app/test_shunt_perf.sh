#!/usr/bin/env bash
# shunt-perf: command line and bad input (exit 2 + message) for every
# transport (floor, shm provider, vq shm driver), JSON and CSV
# shapes, short real runs of pingpong / bw / rate on the floor transport with
# both processes spawned locally, server/client on loopback, --plot, and a
# peer killed or stalled mid-run; verified short runs of pingpong/bw/rate on -p shm and
# --vq shm, and server/client over both. Busy-polling sides go to two
# distinct CPUs, except where a server and client share one on purpose (a
# responder's last message that needs its progress after the send returns).
set -uo pipefail
perf=$1
fails=0
work=$(mktemp -d)
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
check() { # description, command...
  local d=$1; shift
  if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
ncpu=$(nproc)
if [ "$ncpu" -lt 2 ]; then
  echo "SKIP: shunt-perf needs two CPUs for two polling processes (have $ncpu)"
  exit 77
fi
read -r A B < <(python3 -c 'import os; c=sorted(os.sched_getaffinity(0)); print(c[0], c[1])')
cores="--cores $A,$B"
T="--timeout 10"

# ---- help ----
out=$("$perf" --help); rc=$?
check "--help exits 0" test $rc -eq 0
for opt in pingpong bw rate --provider --ep-type --op --domain --vq --driver --qp-type --size --iterations --duration \
           --warmup --window --cores --timeout --verify --tsc-one-way --shared-buffers --threading --server --port --json --csv --plot --help "Exit status"; do
  check "--help documents $opt" grep -q -- "$opt" <<<"$out"
done
check "--help lists the floor transport" grep -q -- '-p   line' <<<"$out"
check "--help hides the internal role option" test "$(grep -c -- '--role' <<<"$out")" -eq 0

# ---- bad input: exit 2 and a message naming the problem ----
# Each case is a process that stops at its command line: bad starts it (up
# to four at a time, each with its own files) and bad_checks, after the
# last one, checks them in order.
bad_n=0
bad_pids=()
bad() { # description, expected message regex, args...
  local d=$1 re=$2; shift 2
  bad_n=$((bad_n + 1))
  local f="$work/bad.$bad_n"
  printf '%s\n' "$d" >"$f.what"
  printf '%s\n' "$re" >"$f.re"
  if [ ${#bad_pids[@]} -ge 4 ]; then
    wait "${bad_pids[0]}"
    bad_pids=("${bad_pids[@]:1}")
  fi
  { "$perf" "$@" >"$f.out" 2>"$f.err"; echo $? >"$f.rc"; } &
  bad_pids+=($!)
}
bad_checks() {
  local i f d re rc
  for p in "${bad_pids[@]}"; do wait "$p"; done
  bad_pids=()
  for ((i = 1; i <= bad_n; i++)); do
    f="$work/bad.$i"
    d=$(cat "$f.what"); re=$(cat "$f.re"); rc=$(cat "$f.rc")
    check "$d: exit 2" test "$rc" -eq 2
    # A wrong status with the right message: show what else was said (a
    # sanitizer report at exit, a signal) so the failure can be told apart.
    [ "$rc" -eq 2 ] || { echo "  exit status $rc; stderr:"; grep -v '^  ' "$f.err" | head -40; }
    check "$d: message" grep -Eq -- "$re" "$f.err"
    check "$d: nothing on stdout" test ! -s "$f.out"
    rm -f "$f".*
  done
  bad_n=0
}
bad "unknown provider" "unknown provider 'nosuch'" pingpong -p nosuch $cores
bad "vq driver not built yet" "driver 'mlx5' is not available" pingpong --vq --driver mlx5 $cores
bad "unknown vq driver" "unknown driver 'nosuch'" pingpong --vq --driver nosuch $cores
bad "size 0" "at least 1 byte" pingpong -S 0 $cores
bad "size 0 in a list" "at least 1 byte" pingpong -S 8,0 $cores
bad "size over 4 MiB" "over the maximum" pingpong -S 4194305 $cores
bad "size 5M" "over the maximum" pingpong -S 5M $cores
bad "size not a number" "bad size '8x'" pingpong -S 8x $cores
bad "core that does not exist" "core 4096 does not exist|bad core '4096'" pingpong --cores "$A,4096"
bad "core beyond the machine" "core $ncpu does not exist" pingpong --cores "$A,$ncpu"
bad "same core twice" "starve each other" pingpong --cores "$A,$A"
bad "core not a number" "bad core 'x'" pingpong --cores "$A,x"
bad "iterations 0" "bad iteration count" pingpong -I 0 $cores
bad "iterations negative" "bad iteration count" pingpong -I -3 $cores
bad "iterations garbage" "bad iteration count" pingpong -I 12abc $cores
bad "iterations too many" "bad iteration count" pingpong -I 100000001 $cores
bad "duration 0" "bad duration" pingpong --duration 0 $cores
bad "iterations with duration" "exclude each other" pingpong -I 10 --duration 1 $cores
bad "warm-up garbage" "bad warm-up" pingpong -w x $cores
bad "window 0" "bad window" bw -W 0 $cores
bad "port 0" "bad port" pingpong -P 0 $cores
bad "no test" "no test given"
bad "unknown test" "unknown test 'latency'" latency $cores
bad "unknown option" "unknown option '--frobnicate'" pingpong --frobnicate
bad "missing argument" "needs an argument" pingpong -S
bad "bad endpoint type" "bad endpoint type 'xyz'" pingpong -e xyz $cores
bad "bad operation" "bad operation 'read'" pingpong --op read $cores
bad "operation the floor lacks" "supports --op msg only" pingpong -p line --op atomic $cores
bad "bad QP type" "bad QP type 'xrc'" pingpong --vq --qp-type xrc $cores
bad "json with csv" "exclude each other" pingpong --json --csv $cores
bad "driver without --vq" "needs --vq" pingpong --driver raw-line $cores
bad "domain with --vq" "is for the endpoint level" pingpong --vq --domain shm0 $cores
bad "one core for two local sides" "needs two CPUs" pingpong --cores "$A"
bad "stray argument" "unexpected argument" pingpong 127.0.0.1 extra $cores
# the Shunt transports: provider shm (endpoint level) and driver shm (vq level)
bad "shm: size 0" "at least 1 byte" pingpong -p shm -S 0 $cores
bad "shm: size over 4 MiB" "over the maximum" pingpong -p shm -S 4194305 $cores
bad "shm: core that does not exist" "core $ncpu does not exist" pingpong -p shm --cores "$A,$ncpu"
bad "shm dgram: size over the datagram limit" "over the largest message of this configuration \\([0-9]+ bytes\\)" \
  pingpong -p shm -e dgram -S 64K $cores
bad "shm dgram: bw is refused (unreliable)" "dgram is unreliable" bw -p shm -e dgram $cores
bad "shm atomic: size is one 8-byte element" "over the largest message of this configuration \\(8 bytes\\)" \
  pingpong -p shm --op atomic -S 16 $cores
bad "shm atomic: under one element" "under the smallest message" pingpong -p shm --op atomic -S 4 $cores
bad "shm atomic: --verify has no payload to check" "carries none" pingpong -p shm --op atomic --verify $cores
bad "vq shm: size 0" "at least 1 byte" pingpong --vq --driver shm -S 0 $cores
bad "vq shm: size over 4 MiB" "over the maximum" pingpong --vq --driver shm -S 5M $cores
bad "vq shm: core that does not exist" "core $ncpu does not exist" pingpong --vq --driver shm --cores "$A,$ncpu"
bad "vq shm ud: size over the UD MTU" "over the largest message of this configuration" \
  pingpong --vq --driver shm --qp-type ud -S 8K $cores
bad "vq shm ud: no RDMA write" "has no RDMA write" pingpong --vq --driver shm --qp-type ud --op write $cores
bad "vq shm: no tagged operation" "vq level supports --op msg" pingpong --vq --driver shm --op tagged $cores
bad "vq shm: -e is not a vq option" "use --qp-type" pingpong --vq --driver shm -e msg $cores
bad "--shared-buffers on the floor transport" "transport 'line' has none" pingpong -p line --shared-buffers $cores
bad "--shared-buffers on the vq level" "endpoint-level option" pingpong --vq --driver shm --shared-buffers $cores
bad "--threading of no level" "threading level" pingpong -p shm --threading all $cores
bad "--threading on the vq level" "endpoint-level option" pingpong --vq --driver shm --threading safe $cores
bad "--threading on the floor transport" "transport 'line' has none" pingpong -p line --threading safe $cores
bad "--tsc-one-way with bw" "measures pingpong only" bw --tsc-one-way $cores
bad "--tsc-one-way with --verify" "exclude each other" pingpong --tsc-one-way --verify $cores
bad "--tsc-one-way under 8 bytes" "at least 8 bytes" pingpong --tsc-one-way -S 4 $cores
bad_checks

# ---- JSON: one object per size and line, documented fields, sane values ----
"$perf" pingpong -p line -e rdm -S 8 -I 20000 $cores $T --json >"$work/pp.json" 2>"$work/err"; rc=$?
check "pingpong --json exits 0" test $rc -eq 0
check "pingpong --json: one object on one line" test "$(wc -l <"$work/pp.json")" -eq 1
check "pingpong --json: schema" python3 - "$work/pp.json" 20000 8 "$A,$B" <<'EOF'
import json, sys
path, iters, size, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(c) for c in sys.argv[4].split(",")]
objs = [json.loads(l) for l in open(path)]
assert len(objs) == 1, objs
o = objs[0]
for k, t in [("schema", int), ("test", str), ("level", str), ("provider", str), ("ep_type", str), ("op", str),
             ("size", int), ("iterations", int), ("warmup", int), ("window", int), ("cores", list),
             ("elapsed_ns", float), ("bandwidth_MBps", float), ("msg_rate_Mmps", float), ("one_way_ns", dict),
             ("verified", bool), ("interrupted", bool)]:
    assert isinstance(o[k], t), (k, o[k])
assert o["schema"] == 1 and o["test"] == "pingpong" and o["level"] == "endpoint"
assert o["provider"] == "line" and o["ep_type"] == "rdm" and o["op"] == "msg"
assert o["size"] == size and o["iterations"] == iters and o["cores"] == cores and o["verified"] is False, o
assert o["interrupted"] is False, o
ow = o["one_way_ns"]
seq = [ow[k] for k in ("min", "p50", "p90", "p99", "p999", "p9999", "max")]
assert all(isinstance(v, float) for v in seq), ow
assert seq == sorted(seq), seq          # percentiles are ordered
assert 0 < ow["min"] and ow["min"] <= ow["mean"] <= ow["max"], ow
# every iteration is one round trip: the mean one-way latency is half of the elapsed time per iteration
assert abs(ow["mean"] * 2 * iters - o["elapsed_ns"]) <= 0.01 * o["elapsed_ns"], (ow["mean"], o["elapsed_ns"])
# two messages per iteration
assert abs(o["msg_rate_Mmps"] - 2 * iters / o["elapsed_ns"] * 1e3) <= 1e-3 * o["msg_rate_Mmps"] + 1e-6
assert abs(o["bandwidth_MBps"] - o["msg_rate_Mmps"] * size) <= 1e-3 * o["bandwidth_MBps"] + 1e-3
EOF

"$perf" pingpong -p line -S 1,64,1K -I 2000 -w 100 $cores $T --json >"$work/list.json" 2>"$work/err"; rc=$?
check "size list --json exits 0" test $rc -eq 0
check "size list: one object per size, in order" python3 -c "
import json, sys
o = [json.loads(l) for l in open('$work/list.json')]
assert [x['size'] for x in o] == [1, 64, 1024], o
assert all(x['iterations'] == 2000 and x['warmup'] == 100 for x in o)"
check "size list: progress line on stderr" grep -q 'pingpong size 1024 (3/3)' "$work/err"

# Only the list of sizes is checked here: a few iterations per size do (the
# figures are checked above; the large sizes are what takes time).
"$perf" pingpong -p line -S all -I 4 -w 1 $cores $T --json >"$work/all.json" 2>/dev/null; rc=$?
check "-S all exits 0" test $rc -eq 0
check "-S all: powers of two from 1 B to 4 MiB" python3 -c "
import json
o = [json.loads(l) for l in open('$work/all.json')]
assert [x['size'] for x in o] == [1 << i for i in range(23)], [x['size'] for x in o]"

# ---- bw and rate: real runs, the throughput figures agree with each other ----
for t in bw rate; do
  "$perf" $t -p line -S 8,4K -I 4000 -W 32 $cores $T --json >"$work/$t.json" 2>"$work/err"; rc=$?
  check "$t --json exits 0" test $rc -eq 0
  check "$t --json: shape and figures" python3 -c "
import json
o = [json.loads(l) for l in open('$work/$t.json')]
assert [x['size'] for x in o] == [8, 4096]
for x in o:
    assert x['test'] == '$t' and x['one_way_ns'] is None and x['iterations'] == 4000
    assert 1 <= x['window'] <= 32, x
    assert x['msg_rate_Mmps'] > 0 and x['elapsed_ns'] > 0
    assert abs(x['msg_rate_Mmps'] - 4000 / x['elapsed_ns'] * 1e3) <= 1e-3 * x['msg_rate_Mmps'] + 1e-6
    assert abs(x['bandwidth_MBps'] - x['msg_rate_Mmps'] * x['size']) <= 1e-3 * x['bandwidth_MBps'] + 1e-3"
done
"$perf" rate -p line --duration 0.2 -S 8 $cores $T --json >"$work/dur.json" 2>"$work/err"; rc=$?
check "rate --duration exits 0" test $rc -eq 0
# Loose on purpose: the machine is shared, so only "estimated, and bounded"
# is asserted, not how close to 0.2 s the run came.
check "rate --duration: iterations estimated, run bounded" python3 -c "
import json
x = json.loads(open('$work/dur.json').read())
assert x['iterations'] >= 1 and 0 < x['elapsed_ns'] < 60e9, x"

# ---- --verify: every byte of every message checked, both directions ----
for t in pingpong bw rate; do
  # small sizes around the 48-byte inline limit with many messages (ring
  # wrap-around), large ones up to 4 MiB with a few (the data area)
  "$perf" $t -p line -S 1,7,8,9,47,48,49,64,1000,4K -I 600 -w 50 -W 16 --verify $cores $T --json >"$work/v-$t.json" 2>"$work/err" &&
  "$perf" $t -p line -S 64K,1M,4M -I 12 -w 3 -W 16 --verify $cores $T --json >>"$work/v-$t.json" 2>"$work/err"; rc=$?
  check "$t --verify across the inline limit and up to 4 MiB: exit 0" test $rc -eq 0
  check "$t --verify: every size reported as verified" python3 -c "
import json
o = [json.loads(l) for l in open('$work/v-$t.json')]
assert len(o) == 13 and all(x['verified'] is True for x in o), o"
done

"$perf" pingpong -p line -S 8 -I 1000 $cores $T --json >"$work/meta.json" 2>/dev/null
check "--json names the host, CPU model, kernel, Shunt version and date" python3 -c "
import json, re
d = json.loads(open('$work/meta.json').readline())
assert d['host'] and d['kernel'] and re.match(r'^[0-9]+\\.[0-9]+\\.[0-9]+$', d['shunt_version']), d
assert re.match(r'^20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$', d['date']), d
assert 'cpu_model' in d, d"
# ---- CSV and the human table ----
"$perf" pingpong -p line -S 8,16 -I 1000 $cores $T --csv >"$work/pp.csv" 2>/dev/null; rc=$?
check "--csv exits 0" test $rc -eq 0
check "--csv header" test "$(head -1 "$work/pp.csv")" = \
  "test,level,provider,ep_type,qp_type,op,size,iterations,warmup,window,elapsed_ns,min_ns,mean_ns,p50_ns,p90_ns,p99_ns,p999_ns,p9999_ns,max_ns,bandwidth_MBps,msg_rate_Mmps,verified,host,cpu_model,kernel,shunt_version,date,interrupted,shared_buffers,threading"
check "--csv rows" python3 -c "
import csv
r = list(csv.DictReader(open('$work/pp.csv')))
assert [x['size'] for x in r] == ['8', '16'] and all(float(x['p50_ns']) > 0 for x in r), r"
"$perf" bw -p line -S 64 -I 1000 $cores $T --csv >"$work/bw.csv" 2>/dev/null
check "--csv for bw leaves the latency columns empty" python3 -c "
import csv
r = list(csv.DictReader(open('$work/bw.csv')))
assert len(r) == 1 and r[0]['p50_ns'] == '' and float(r[0]['bandwidth_MBps']) > 0, r"
out=$("$perf" pingpong --vq --driver raw-line -S 8 -I 1000 $cores $T); rc=$?
check "table (vq level) exits 0" test $rc -eq 0
check "table names the level and driver" grep -q "vq driver 'raw-line'" <<<"$out"
check "table has the percentile header" grep -Eq 'size +iters +window +p50 +p90 +p99 +p99\.9 +p99\.99 +max +MB/s +Mmsg/s' <<<"$out"
check "table has one row for size 8" grep -Eq '^ +8 +1000 +1 ' <<<"$out"
check "table shows latencies with their unit (ns, µs, ms by magnitude)" \
  bash -c 'grep -Eq "^ +8 +1000 +1 +[0-9.]+ (ns|µs|ms) +[0-9.]+ (ns|µs|ms) " <<<"$1" && ! grep -q "e+" <<<"$1"' _ "$out"

# ---- default cores come from the topology helper ----
"$perf" pingpong -p line -S 8 -I 1000 $T --json >"$work/def.json" 2>"$work/err"; rc=$?
check "default cores: exits 0" test $rc -eq 0
check "default cores: two distinct CPUs" python3 -c "
import json, os
c = json.loads(open('$work/def.json').read())['cores']
assert len(c) == 2 and c[0] != c[1] and set(c) <= os.sched_getaffinity(0), c"

# ---- server / client on loopback ----
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$perf" pingpong -p line -s 127.0.0.1 -P "$port" --cores "$B" $T >"$work/srv.out" 2>"$work/srv.err" &
srv=$!; bg+=("$srv")
"$perf" pingpong -p line 127.0.0.1 -P "$port" --cores "$A" -S 8,256 -I 5000 $T --json >"$work/cli.json" 2>"$work/cli.err"; rc=$?
check "client exits 0" test $rc -eq 0
wait "$srv"; src=$?
check "server exits 0 after one client" test $src -eq 0
check "client: results with both CPUs" python3 -c "
import json
o = [json.loads(l) for l in open('$work/cli.json')]
assert [x['size'] for x in o] == [8, 256] and o[0]['cores'] == [$A, $B], o"
"$perf" bw -p line -s 127.0.0.1 -P "$port" --cores "$B" $T >/dev/null 2>&1 &
srv=$!; bg+=("$srv")
"$perf" rate -p line 127.0.0.1 -P "$port" --cores "$A" -S 8 -I 5000 $T --json >"$work/cli2.json" 2>/dev/null; rc=$?
wait "$srv"; src=$?
check "server takes the client's test (rate)" python3 -c "
import json
x = json.loads(open('$work/cli2.json').read())
assert x['test'] == 'rate' and x['iterations'] == 5000" 
check "second client/server pair exits 0" test $rc -eq 0 -a $src -eq 0
"$perf" pingpong -p line 127.0.0.1 -P "$port" --cores "$A" -S 8 -I 10 --timeout 0.5 >/dev/null 2>"$work/err"; rc=$?
check "client without a server: exit 1" test $rc -eq 1
check "client without a server: message" grep -q "cannot connect" "$work/err"
check "client without a server: it said it was waiting" grep -q "waiting for the server at 127.0.0.1 port $port" "$work/err"
# A client started before its server says so, then runs when the server comes.
"$perf" pingpong -p line 127.0.0.1 -P "$port" --cores "$A" -S 8 -I 2000 $T --json >"$work/early.json" 2>"$work/early.err" &
cli=$!; bg+=("$cli")
for _ in $(seq 100); do grep -q "waiting for the server" "$work/early.err" && break; sleep 0.05; done
"$perf" pingpong -p line -s 127.0.0.1 -P "$port" --cores "$B" $T >/dev/null 2>&1 &
srv=$!; bg+=("$srv")
wait "$cli"; rc=$?
wait "$srv"; src=$?
check "client started first: says it is waiting, then connects and runs" \
  bash -c 'test "$2" -eq 0 -a "$3" -eq 0 && grep -q "waiting for the server" "$1" && grep -q "connected to the server" "$1"' _ "$work/early.err" "$rc" "$src" ||
  sed 's/^/    /' "$work/early.err"

"$perf" pingpong -p line -s 127.0.0.1 -P "$port" --cores "$B" --timeout 0.5 >/dev/null 2>"$work/err"; rc=$?
check "server without a client: exit 1 after the timeout" test $rc -eq 1
check "server without a client: message" grep -q "no client connected" "$work/err"
"$perf" pingpong -p line no-such-host.invalid -P "$port" --cores "$A" --timeout 0.5 >/dev/null 2>"$work/err"; rc=$?
check "client with an unknown host: exit 1 with a message" bash -c "test $rc -eq 1 && grep -q 'cannot resolve' '$work/err'"

# ---- a peer killed mid-run: clear failure, nothing hangs ----
"$perf" pingpong -p line -S 8 -I 20000000 $cores --timeout 20 >/dev/null 2>"$work/kill.err" &
launcher=$!; bg+=("$launcher")
child=""
for _ in $(seq 100); do
  child=$(pgrep -P "$launcher" | head -1)
  [ -n "$child" ] && break
  sleep 0.05
done
# Mid-run: once the size's running line is out (bounded: a slow build, such
# as ThreadSanitizer's, takes seconds to set up; killed before, the
# initiator sees a failed handshake, not a dead responder).
for _ in $(seq 150); do grep -q "^shunt-perf: pingpong size 8: [0-9]* s, " "$work/kill.err" && break; sleep 0.1; done
[ -n "$child" ] && kill -9 "$child"
start=$(date +%s)
wait "$launcher"; rc=$?
check "killed responder: initiator exits 1" test $rc -eq 1
check "killed responder: detected within 5 s" test $(( $(date +%s) - start )) -le 5
check "killed responder: message" grep -Eq "responder (died|gone)" "$work/kill.err"

# ---- a responder that stops making progress mid-run: the timeout, and where ----
# (--timeout also bounds the setup, which a loaded machine slows: 3 s.)
"$perf" pingpong -p line -S 8 -I 100000000 $cores --timeout 3 --json >"$work/stall.json" 2>"$work/stall.err" &
launcher=$!; bg+=("$launcher")
for _ in $(seq 300); do grep -q "^shunt-perf: pingpong size 8: " "$work/stall.err" && break; sleep 0.1; done
child=$(pgrep -P "$launcher" | head -1)
[ -n "$child" ] && kill -STOP "$child"
for _ in $(seq 150); do grep -q "failed" "$work/stall.err" && break; sleep 0.1; done
[ -n "$child" ] && kill -CONT "$child" # it then finds the channel closed and exits
wait "$launcher"; rc=$?
check "stalled responder: initiator exits 1, no JSON" test $rc -eq 1 -a ! -s "$work/stall.json"
check "stalled responder: the message names the timeout and how far the size got" \
  grep -Eq "pingpong size 8 failed: no progress within the timeout \(after [0-9]+ of 100000000 timed iterations, --timeout 3 s\)" \
  "$work/stall.err" || sed 's/^/    /' "$work/stall.err"

# ---- the initiator killed mid-run: the spawned responder notices and exits ----
"$perf" pingpong -p line -S 8 -I 20000000 $cores --timeout 20 >/dev/null 2>"$work/kill2.err" &
launcher=$!; bg+=("$launcher")
child=""
for _ in $(seq 100); do
  child=$(pgrep -P "$launcher" | head -1)
  [ -n "$child" ] && break
  sleep 0.05
done
for _ in $(seq 150); do grep -q "^shunt-perf: pingpong size 8: [0-9]* s, " "$work/kill2.err" && break; sleep 0.1; done
kill -9 "$launcher"; wait "$launcher" 2>/dev/null
gone=1
for _ in $(seq 100); do
  # gone, or a zombie waiting for whoever inherited it to reap it
  state=$(awk '{print $3}' "/proc/$child/stat" 2>/dev/null)
  [ -z "$state" ] || [ "$state" = Z ] && { gone=0; break; }
  sleep 0.1
done
check "killed initiator: the responder exits within 10 s" test -n "$child" -a "$gone" -eq 0
check "killed initiator: the responder says why" grep -q "responder: .*initiator" "$work/kill2.err"
[ "$gone" -ne 0 ] && [ -n "$child" ] && kill -9 "$child"

# ---- a segment left by a killed responder is removed by the next run ----
sh -c 'exit 0' & deadpid=$!; wait $deadpid
stale=/dev/shm/shunt-perf.$deadpid.0
if [ -d /dev/shm ] && ! kill -0 "$deadpid" 2>/dev/null; then
  : >"$stale"
  "$perf" pingpong -p line -S 8 -I 100 $cores $T >/dev/null 2>&1
  check "stale segment of a dead responder removed" test ! -e "$stale"
  rm -f "$stale"
fi
leaked=0
for f in /dev/shm/shunt-perf.*; do
  [ -e "$f" ] || continue
  p=${f#/dev/shm/shunt-perf.}; p=${p%%.*}
  kill -0 "$p" 2>/dev/null || leaked=$((leaked + 1))
done
check "no segment of a finished run left behind" test "$leaked" -eq 0

# ---- running line, --quiet, Ctrl-C ----
"$perf" pingpong -p line -S 8,16 -I 2000 -q $cores $T --json >/dev/null 2>"$work/quiet.err"; rc=$?
check "--quiet: nothing on stderr (no progress line)" bash -c 'test "$2" -eq 0 -a ! -s "$1"' _ "$work/quiet.err" "$rc"
# A long size prints a running line each second; Ctrl-C then ends the run
# and prints what was measured.
# (bw streams 8-byte messages over the floor transport at tens of millions
# per second: the 10^8 iterations would end before the first line, so it
# streams 64 KiB messages.)
for t in pingpong bw; do
  if [ $t = pingpong ]; then sz=8 lbl=8; else sz=65536 lbl=64K; fi
  "$perf" $t -p line -S $sz,$((2 * sz)) -I 100000000 $cores $T --json >"$work/int.json" 2>"$work/int.err" &
  l=$!; bg+=("$l")
  for _ in $(seq 150); do grep -q "^shunt-perf: $t size $lbl: [0-9]* s, " "$work/int.err" && break; sleep 0.1; done
  if [ $t = pingpong ]; then
    re="^shunt-perf: pingpong size 8: [0-9]+ s, [0-9.]+[kMG]? iterations; last [0-9.]+ s: one-way p50 [0-9.]+ (ns|µs|ms), p99 .*, max "
  else
    re="^shunt-perf: bw size $lbl: [0-9]+ s, [0-9.]+[kMG]? messages; last [0-9.]+ s: [0-9.]+[kMG]? msg/s, [0-9.]+[kMG]?B/s"
  fi
  check "$t: a long size prints a running line on stderr within 15 s" grep -Eq "$re" "$work/int.err"
  kill -INT "$l"
  wait "$l"; rc=$?
  check "$t Ctrl-C: exit 130, the partial size printed as interrupted, the responder quiet" python3 -c "
import json, sys
o = [json.loads(l) for l in open(sys.argv[1])]
assert int(sys.argv[3]) == 130, sys.argv[3]
assert len(o) == 1 and o[0]['size'] == int(sys.argv[4]) and o[0]['interrupted'] is True and 0 < o[0]['iterations'] < 100000000, o
assert o[0]['msg_rate_Mmps'] > 0 and o[0]['elapsed_ns'] > 0
err = open(sys.argv[2]).read()
assert 'interrupted (Ctrl-C)' in err and 'initiator stopped the run' in err and 'failed' not in err, err
" "$work/int.json" "$work/int.err" "$rc" "$sz" || sed 's/^/    /' "$work/int.err" "$work/int.json"
done

# ---- plots ----
wellformed() {
  if command -v xmllint >/dev/null; then xmllint --noout "$1"
  else python3 -c "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])" "$1"; fi
}
"$perf" pingpong -p line -S 8 -I 20000 $cores $T --plot "$work/one.svg" >"$work/out" 2>/dev/null; rc=$?
check "--plot (one size) exits 0" test $rc -eq 0
check "--plot (one size) is well-formed SVG" wellformed "$work/one.svg"
check "--plot (one size) is latency against percentile, both log scales, time units, markers" python3 -c "
import re, xml.etree.ElementTree as E
ns = '{http://www.w3.org/2000/svg}'
r = E.parse('$work/one.svg').getroot()
assert r.tag == ns + 'svg'
texts = [t.text or '' for t in r.iter(ns + 'text')]
alltext = ' '.join(texts)
assert 'one-way latency' in alltext and 'percentile' in alltext, texts
for x in ('0%', '50%', '90%', '99%', '99.9%', '99.99%'):
    assert x in texts, (x, texts)
for m in ('p50', 'p90', 'p99', 'p99.9', 'p99.99', 'max'):
    assert any(re.match(m.replace('.', r'\\.') + r' [0-9.]+ (ns|µs|ms|s)$', t) for t in texts), (m, texts)
ticks = [t for t in texts if re.match(r'^[0-9.]+ (ns|µs|ms|s)$', t)]
assert len(ticks) >= 3, texts               # the latency axis is labelled in time units
assert 'e+' not in alltext, texts
curve = [p for p in r.iter(ns + 'polyline') if len(p.get('points').split()) > 100]
assert curve, 'the percentile curve'
ys = [float(pt.split(',')[1]) for pt in curve[0].get('points').split()]
assert all(b <= a + 1e-6 for a, b in zip(ys, ys[1:])), 'latency never falls as the percentile rises (y grows downwards)'
"
check "the table names the plot file" grep -q "# plot: $work/one.svg" "$work/out"
"$perf" pingpong -p line -S 1,8,64,512 -I 1000 $cores $T --plot "$work/sweep.svg" --json >/dev/null 2>&1; rc=$?
check "--plot (sweep) exits 0" test $rc -eq 0
check "--plot (sweep) is well-formed SVG" wellformed "$work/sweep.svg"
check "--plot (sweep) draws latency against size" python3 -c "
import xml.etree.ElementTree as E
r = E.parse('$work/sweep.svg').getroot()
ns = '{http://www.w3.org/2000/svg}'
texts = [t.text for t in r.iter(ns + 'text')]
assert 'message size, bytes (log2 scale)' in texts and 'p99' in texts, texts
assert len(list(r.iter(ns + 'polyline'))) >= 3 and len(list(r.iter(ns + 'circle'))) == 4 * 4"
"$perf" pingpong -p line -S 8 -I 10 $cores $T --plot /nonexistent-dir/x.svg >"$work/out" 2>"$work/err"; rc=$?
check "--plot into a missing directory: refused before running (exit 2, a message, no table)" \
  bash -c "test $rc -eq 2 && grep -q 'cannot write' '$work/err' && ! test -s '$work/out'"
"$perf" --version >"$work/out"; rc=$?
check "--version prints the Shunt version" bash -c "test $rc -eq 0 && grep -qE '^shunt-perf \\(Shunt\\) [0-9]+\\.[0-9]+\\.[0-9]+$' '$work/out'"

# ---- the shm provider and the vq shm driver: real runs ----
# JSON of the endpoint level: the fields perf.md documents.
"$perf" pingpong -p shm -e rdm -S 8 -I 20000 $cores $T --json >"$work/shm.json" 2>"$work/err"; rc=$?
check "-p shm pingpong --json exits 0" test $rc -eq 0
check "-p shm pingpong --json: schema" python3 - "$work/shm.json" "$A,$B" <<'EOF2'
import json, sys
o = [json.loads(l) for l in open(sys.argv[1])]
assert len(o) == 1, o
o = o[0]
assert o["schema"] == 1 and o["provider"] == "shm" and o["ep_type"] == "rdm" and o["level"] == "endpoint", o
assert o["size"] == 8 and o["iterations"] == 20000 and o["cores"] == [int(c) for c in sys.argv[2].split(",")]
ow = o["one_way_ns"]
seq = [ow[k] for k in ("min", "p50", "p90", "p99", "p999", "p9999", "max")]
assert all(isinstance(v, float) and v > 0 for v in seq) and seq == sorted(seq), ow
assert abs(ow["mean"] * 2 * 20000 - o["elapsed_ns"]) <= 0.01 * o["elapsed_ns"]
EOF2
"$perf" pingpong --vq --driver shm --qp-type uc -S 8 -I 20000 $cores $T --json >"$work/vq.json" 2>"$work/err"; rc=$?
check "--vq shm pingpong --json exits 0" test $rc -eq 0
check "--vq shm pingpong --json: level vq, driver shm, qp_type uc" python3 -c "
import json
o = json.loads(open('$work/vq.json').read())
assert o['level'] == 'vq' and o['provider'] == 'shm' and o['qp_type'] == 'uc' and o['one_way_ns']['p50'] > 0, o"

# Every test on both levels, payload checked byte for byte (--verify), sizes
# across the inline and fragment limits.
run_verified() { # description, expected sizes (comma list), args...
  local d=$1 want=$2; shift 2
  "$perf" "$@" $cores $T --verify --json >"$work/rv.json" 2>"$work/rv.err"; local rc=$?
  check "$d: exit 0" test $rc -eq 0
  check "$d: every size verified" python3 -c "
import json
o = [json.loads(l) for l in open('$work/rv.json')]
assert [x['size'] for x in o] == [$want] and all(x['verified'] for x in o), o" || sed 's/^/    /' "$work/rv.err"
}
for t in pingpong bw rate; do
  run_verified "-p shm rdm $t" "8,1000,65536" $t -p shm -e rdm -S 8,1000,64K -I 300 -w 20 -W 16
  run_verified "--vq shm rc $t" "8,1000,65536" $t --vq --driver shm -S 8,1000,64K -I 300 -w 20 -W 16
done
run_verified "-p shm msg tagged pingpong" "8,4096" pingpong -p shm -e msg --op tagged -S 8,4K -I 300 -w 20
run_verified "-p shm rdm write bw" "8,4096" bw -p shm --op write -S 8,4K -I 300 -w 20 -W 16
# --shared-buffers: the same runs from the provider's shareable memory (the
# rendezvous by memcpy from 16 KiB, RMA written directly)
run_verified "-p shm rdm pingpong --shared-buffers" "8,65536,1048576" pingpong -p shm -e rdm --shared-buffers -S 8,64K,1M -I 20 -w 4
run_verified "-p shm rdm bw --shared-buffers" "8,65536" bw -p shm -e rdm --shared-buffers -S 8,64K -I 100 -w 10 -W 16
run_verified "-p shm rdm write bw --shared-buffers" "8,4096" bw -p shm --op write --shared-buffers -S 8,4K -I 100 -w 10 -W 16
"$perf" pingpong -p shm --shared-buffers -S 8 -I 100 $cores $T --json >"$work/sb.json" 2>"$work/err"; rc=$?
check "--shared-buffers: --json says so" python3 -c "
import json
o = json.loads(open('$work/sb.json').read())
assert $rc == 0 and o['shared_buffers'] is True, o"
check "without --shared-buffers: --json says false" python3 -c "
import json
o = json.loads(open('$work/shm.json').readline())
assert o['shared_buffers'] is False, o"
run_verified "-p shm dgram pingpong" "8,900" pingpong -p shm -e dgram -S 8,900 -I 300 -w 20
# --threading safe: the locked endpoint (tagged injects take the endpoint's lock)
run_verified "-p shm rdm tagged rate --threading safe" "8,1000" rate -p shm -e rdm --op tagged --threading safe -S 8,1000 -I 300 -w 20 -W 16
check "--threading safe: --json says so" python3 -c "
import json
o = [json.loads(l) for l in open('$work/rv.json')]
assert o and all(x['threading'] == 'safe' for x in o), o"
check "without --threading: --json says domain" python3 -c "
import json
o = json.loads(open('$work/shm.json').readline())
assert o['threading'] == 'domain', o"
run_verified "--vq shm ud pingpong" "8,4096" pingpong --vq --driver shm --qp-type ud -S 8,4K -I 300 -w 20
run_verified "--vq shm uc write rate" "8,4096" rate --vq --driver shm --qp-type uc --op write -S 8,4K -I 300 -w 20 -W 16
"$perf" rate -p shm --op atomic -S 8 -I 300 -w 20 $cores $T --json >"$work/at.json" 2>"$work/err"; rc=$?
check "-p shm atomic rate: exit 0, every increment seen" python3 -c "
import json
o = json.loads(open('$work/at.json').read())
assert $rc == 0 and o['op'] == 'atomic' and o['iterations'] == 300 and o['msg_rate_Mmps'] > 0, o"

# server / client on loopback, both levels
for lvl in "-p shm -e rdm" "--vq --driver shm"; do
  "$perf" pingpong -s 127.0.0.1 -P "$port" --cores "$B" $T >/dev/null 2>"$work/srv.err" &
  srv=$!; bg+=("$srv")
  "$perf" bw 127.0.0.1 -P "$port" --cores "$A" $lvl -S 8,4K -I 2000 --verify $T --json >"$work/cs.json" 2>"$work/cli.err"; rc=$?
  wait "$srv"; src=$?
  check "server/client ($lvl): both exit 0" test $rc -eq 0 -a $src -eq 0
  check "server/client ($lvl): the client's test, verified" python3 -c "
import json
o = [json.loads(l) for l in open('$work/cs.json')]
assert [x['size'] for x in o] == [8, 4096] and all(x['test'] == 'bw' and x['verified'] for x in o), o"
done

# ---- a responder's last message that its provider cannot finish inside the call ----
# Server and client on ONE CPU (each takes the one CPU it is given), so that
# only one side runs at a time: a message larger than the room in the
# peer's ring (64 KiB in 8 KiB fragments at the endpoint level; 8 KiB in
# chunks through 64-slot rings at the vq level) is only partly in the ring
# when the responder's send returns, and the rest moves on only while the
# responder keeps calling its transport (manual progress). A responder that
# reported the size done after posting its last echo left the initiator
# waiting for the rest for good ("no progress within the timeout").
for c in "1024 -p shm -e rdm -S 64K" "64 --vq --driver shm -S 8K"; do
  slots=${c%% *} lvl=${c#* }
  SHUNT_SHM_RING_SLOTS=$slots "$perf" pingpong -s 127.0.0.1 -P "$port" --cores "$A" $T >/dev/null 2>"$work/srv1.err" &
  srv=$!; bg+=("$srv")
  # shellcheck disable=SC2086
  SHUNT_SHM_RING_SLOTS=$slots "$perf" pingpong 127.0.0.1 -P "$port" --cores "$A" $lvl -I 3 -w 0 $T --json \
    >"$work/one.json" 2>"$work/one.err"; rc=$?
  wait "$srv"; src=$?
  check "one CPU ($lvl, $slots-slot rings): the responder finishes its last echo; both exit 0" \
    test $rc -eq 0 -a $src -eq 0 || sed 's/^/    /' "$work/one.err" "$work/srv1.err"
  check "one CPU ($lvl): every iteration measured" python3 -c "
import json, sys
o = [json.loads(l) for l in open(sys.argv[1])]
assert len(o) == 1 and o[0]['iterations'] == 3 and o[0]['one_way_ns']['p50'] > 0, o" "$work/one.json"
done

# ---- --tsc-one-way: one-way latency from the responder's TSC stamps ----
if grep -qw constant_tsc /proc/cpuinfo && grep -qw nonstop_tsc /proc/cpuinfo; then
  for t in "-p line" "-p shm" "--vq --driver shm"; do
    # shellcheck disable=SC2086
    "$perf" pingpong $t -S 8,64 -I 20000 --tsc-one-way $cores $T --json >"$work/ow.json" 2>"$work/err"; rc=$?
    check "$t --tsc-one-way: exit 0" test $rc -eq 0
    check "$t --tsc-one-way: tsc_one_way_ns per size, ordered, under the round trip" python3 -c "
import json, sys
o = [json.loads(l) for l in open(sys.argv[1])]
assert [x['size'] for x in o] == [8, 64], o
for x in o:
    t, h = x['tsc_one_way_ns'], x['one_way_ns']
    assert 0 < t['p50'] <= t['p99'] <= t['max'], t
    assert t['min'] <= t['p50'], t
    assert t['p50'] < 2 * h['p50'] * 1.125 + 1000, (t, h)  # one way is under a round trip
" "$work/ow.json"
  done
  "$perf" pingpong -p line -S 8 -I 20000 $cores $T >"$work/plain.json" --json 2>/dev/null
  check "without --tsc-one-way there is no tsc_one_way_ns" python3 -c "
import json, sys
assert 'tsc_one_way_ns' not in json.loads(open(sys.argv[1]).readline())" "$work/plain.json"
  "$perf" pingpong -p line -S 8 -I 20000 --tsc-one-way $cores $T >"$work/ow.txt" 2>/dev/null
  check "--tsc-one-way: the table has the one-way line" grep -q "one way from TSC stamps" "$work/ow.txt"
else
  echo "skip --tsc-one-way runs: this host's TSC is not invariant"
  bad "--tsc-one-way without an invariant TSC" "not invariant" pingpong --tsc-one-way $cores
  bad_checks
fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
