#!/usr/bin/env bash
# shunt-info: help, version, default output, topology, env listing, bad usage,
# --json for every section, --live option errors.
set -uo pipefail
info=$1
fails=0
check() { # description, command...
  local d=$1; shift
  if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); return 1; fi
}
# check_rc DESCRIPTION WANT: the last command's exit status ($rc) is WANT;
# if not, its stderr (saved in $err) is shown, a sanitizer's report with it.
err=$(mktemp)
trap 'rm -f "$err"' EXIT
check_rc() {
  check "$1" test "$rc" -eq "$2" || sed 's/^/    | /' "$err" | tail -n 60
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
# A bad SHUNT_* value: -E marks it, and the first use of a layer (getinfo
# here) fails with the variable and the accepted values named.
for v in SHUNT_LCORES=4096 SHUNT_HUGEPAGES=maybe SHUNT_MEMORY_MB=8 SHUNT_OFI_LAYERING=perhaps SHUNT_PROGRESS_CPU=x SHUNT_TELEMETRY_ONE_WAY=sometimes \
  SHUNT_UNEXPECTED_BYTES=-1; do
  name=${v%%=*}
  marked=$(env "$v" "$info" --env)
  check "--env marks $v invalid with the accepted values" grep -q "^$name .*INVALID (accepted: " <<<"$marked"
  env "$v" "$info" -p shm -e rdm >/dev/null 2>"${TMPDIR:-/tmp}/shunt-info-env.$$"; rc=$?
  check "$v: first use fails" test $rc -ne 0
  check "$v: the error names $name and what is accepted" grep -q "$name.*accepted" "${TMPDIR:-/tmp}/shunt-info-env.$$"
done
SHUNT_EAL_ARGS=--bogus "$info" -p shm -e rdm >/dev/null 2>"${TMPDIR:-/tmp}/shunt-info-env.$$"; rc=$?
check "SHUNT_EAL_ARGS=--bogus: first use fails naming SHUNT_EAL_ARGS" \
  bash -c "test $rc -ne 0 && grep -q SHUNT_EAL_ARGS '${TMPDIR:-/tmp}/shunt-info-env.$$'"
rm -f "${TMPDIR:-/tmp}/shunt-info-env.$$"
check "--env lists SHUNT_OFI_LAYERING" grep -q '^SHUNT_OFI_LAYERING ' <<<"$envs"
check "--env lists SHUNT_PLUGIN_DIR" grep -q '^SHUNT_PLUGIN_DIR ' <<<"$envs"
# The preflight doctor: its exit status follows its findings, --json parses
# and agrees with the text, a bad SHUNT_* is a finding, --clean removes a
# stale segment it reported.
doc=$("$info" --doctor); rc=$?
probs=$(sed -n 's/^\([0-9]*\) problem(s)$/\1/p' <<<"$doc")
check "--doctor prints a problem count" test -n "$probs"
check "--doctor exits 1 exactly when it counts problems" bash -c "test \( $rc -eq 0 -a '$probs' = 0 \) -o \( $rc -eq 1 -a '$probs' != 0 \)"
for c in 'hugepages reserved' 'polling cores isolated' 'SMT siblings' 'cpufreq governor' 'IRQ affinity' 'memlock limit' 'XDP sockets' 'stale shared segments'; do
  check "--doctor checks $c" grep -q "$c" <<<"$doc"
done
check "--doctor --json parses and counts the same problems" bash -c "'$info' --doctor --json | python3 -c '
import json,sys
d=json.load(sys.stdin)
n=sum(c[\"status\"] in (\"warn\",\"fail\") for c in d[\"checks\"])
assert n==d[\"problems\"]==int(sys.argv[1]), (n, d[\"problems\"])
assert all(c[\"fix\"] for c in d[\"checks\"] if c[\"status\"] in (\"warn\",\"fail\"))
' '$probs'"
bad=$(SHUNT_HUGEPAGES=maybe "$info" --doctor); rc=$?
check "--doctor fails on a bad SHUNT_HUGEPAGES and says what to set" bash -c "test $rc -eq 1 && grep -q 'fail.*SHUNT_HUGEPAGES.*not valid' <<<\"\$1\" && grep -q 'fix: set it to auto' <<<\"\$1\"" _ "$bad"
seg=/dev/shm/shunt.doctor-test-$$
if : >"$seg" 2>/dev/null; then
  sleep 2.2
  d=$("$info" --doctor)
  # Any Shunt process of this user may clean it up meanwhile (init() does):
  # the report is checked only when the file outlived the run.
  if [ -e "$seg" ]; then
    check "--doctor reports a stale segment" grep -q '\[warn\] stale shared segments' <<<"$d"
    "$info" --doctor --clean >/dev/null
    check "--doctor --clean removes it" test ! -e "$seg"
  else
    echo "skip --doctor stale segment: another Shunt process removed it first"
  fi
  rm -f "$seg"
fi
"$info" --clean >/dev/null 2>"$err"; rc=$?
check_rc "--clean without --doctor is bad usage" 2
# fi_info counterpart: list, filters, verbose dump, exit codes.
for opt in --list --provider --ep-type --caps --verbose --devices --getenv; do
  check "--help documents $opt" grep -q -- "$opt" <<<"$out"
done
lst=$("$info" -l); rc=$?
check "-l exits 0" test $rc -eq 0
check "-l lists the vq provider as usable, answering to shm too" grep -Eq '^  vq +[0-9]+\.[0-9]+ +builtin +usable +\(also answers to: shm\)$' <<<"$lst"
check "--providers is the same list" bash -c "diff <('$info' --providers) <(echo \"\$1\")" _ "$lst"
rdm=$("$info" -p shm -e rdm); rc=$?
check "-p shm -e rdm exits 0" test $rc -eq 0
check "-p shm -e rdm prints exactly one offer, of the vq provider" test "$(grep -c '^provider: vq$' <<<"$rdm")" -eq 1
check "-p vq offers what -p shm (its alias) offers" bash -c "diff <('$info' -p vq -e rdm) <(echo \"\$1\")" _ "$rdm"
check "-p shm -e rdm is FI_EP_RDM over FI_PROTO_SHM" bash -c "grep -q 'type: FI_EP_RDM' <<<\"\$1\" && grep -q 'protocol: FI_PROTO_SHM' <<<\"\$1\"" _ "$rdm"
allofs=$("$info" -p shm)
check "-p shm offers rdm, msg and dgram" test "$(grep -c 'type: FI_EP_' <<<"$allofs")" -eq 3
check "-e FI_EP_DGRAM spelled as fi_info" bash -c "'$info' -e FI_EP_DGRAM | grep -q 'type: FI_EP_DGRAM'"
rma=$("$info" -c 'FI_MSG|FI_RMA')
check "-c FI_MSG|FI_RMA excludes dgram (no RMA)" bash -c "! grep -q FI_EP_DGRAM <<<\"\$1\" && grep -q FI_EP_RDM <<<\"\$1\"" _ "$rma"
check "-c accepts lower case and commas" bash -c "diff <('$info' -c 'msg,rma') <(echo \"\$1\")" _ "$rma"
"$info" -c 'FI_RMA' -e dgram >/dev/null 2>"$err"; rc=$?
check_rc "no match exits 61 like fi_info (FI_ENODATA)" 61
"$info" -p no-such-provider >/dev/null 2>"$err"; rc=$?
check_rc "unknown provider exits 61" 61
"$info" -c FI_BOGUS >/dev/null 2>"$err"; rc=$?
check_rc "unknown capability exits 2" 2
"$info" -e stream >/dev/null 2>"$err"; rc=$?
check_rc "unknown endpoint type exits 2" 2
"$info" -p >/dev/null 2>"$err"; rc=$?
check_rc "-p without an argument exits 2" 2
verb=$("$info" -p shm -e rdm -v)
for f in caps: threading: mr_mode: max_msg_size: inject_size; do
  check "-v dumps $f" grep -q "$f" <<<"$verb"
done
dev=$("$info" -D); rc=$?
check "-D exits 0" test $rc -eq 0
check "-D lists shm0 with its limits" bash -c "grep -q '^  shm0:' <<<\"\$1\" && grep -q 'max_inline_data' <<<\"\$1\" && grep -Eq 'ud_mtu [1-9][0-9]*' <<<\"\$1\"" _ "$dev"
check "-D lists the operations per QP type" grep -Eq '^    ud +send' <<<"$dev"
check "default shows vq devices" grep -q '^vq devices:' <<<"$all"
g=$("$info" -g SHM_RING)
check "-g filters the environment by name" bash -c "grep -q '^SHUNT_SHM_RING_SLOTS ' <<<\"\$1\" && ! grep -q '^SHUNT_LCORES' <<<\"\$1\"" _ "$g"
for v in SHUNT_PROVIDER SHUNT_PROVIDER_PATH SHUNT_SHM_SEGMENT_MB; do
  check "--env lists $v (every layer)" grep -q "^$v " <<<"$envs"
done
"$info" --no-such-option >/dev/null 2>"$err"; rc=$?
check_rc "unknown option exits 2" 2
"$info" extra >/dev/null 2>"$err"; rc=$?
check_rc "stray argument exits 2" 2
# --json for everything shunt-info prints: one object per run, a key per
# section, each parsed and checked against the text form.
jsonchk() { # description, python body (d = the object), args...
  local d=$1 body=$2; shift 2
  "$info" "$@" --json >"${TMPDIR:-/tmp}/shunt-info-json.$$" 2>/dev/null
  check "--json $*: $d" python3 -c "
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
d = json.loads(lines[0])
$body" "${TMPDIR:-/tmp}/shunt-info-json.$$"
}
jsonchk "default: build, devices, topology, hugepages" "
assert set(d) == {'build', 'devices', 'topology', 'hugepages'}, d.keys()
assert d['build']['drivers'] == '$(sed -n 's/^drivers: *//p' <<<"$all")'.split() and d['build']['version'].count('.') == 2
assert d['topology']['hardware_threads'] == $ncpu and d['topology']['numa_nodes'][0]['os_index'] == 0
assert isinstance(d['hugepages']['reserved'], int)"
jsonchk "-V: the version" "
assert d == {'version': '$("$info" -V | awk '{print $2}')'}, d" -V
jsonchk "-D lists shm0 with its driver, limits and operations" "
dev = [x for x in d['devices'] if x['name'] == 'shm0'][0]
assert dev['driver'] == 'shm' and dev['ud_mtu'] > 0 and dev['max_inline_data'] > 0 and 'send' in dev['ops']['ud'], dev" -D
jsonchk "-t has every core and L3 group" "
t = d['topology']
assert set(d) == {'topology'} and len(t['cores']) == $(grep -c '^  core ' <<<"$topo") and t['l3_groups'], t" -t
jsonchk "-H agrees with the text" "
h = d['hugepages']
assert h['reserved'] == $(awk '/HugePages_Total/ {print $2}' /proc/meminfo) and h['page_size'] == $(awk '/Hugepagesize/ {print $2 * 1024}' /proc/meminfo), h" -H
jsonchk "-E lists every variable of --env with its default" "
names = [e['name'] for e in d['env']]
assert names == '''$(awk 'NR > 1 {print $1}' <<<"$envs")'''.split(), names
assert all(set(e) >= {'layer', 'type', 'default', 'help', 'set'} for e in d['env'])
t = [e for e in d['env'] if e['name'] == 'SHUNT_TELEMETRY'][0]
assert t['type'] == 'boolean' and t['default'] == '1', t" -E
SHUNT_HUGEPAGES=maybe "$info" -g HUGE --json >"${TMPDIR:-/tmp}/shunt-info-json.$$" 2>/dev/null
check "--json -g: a bad value is marked invalid with what is accepted" python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
h = d['env']
assert [e['name'] for e in h] == ['SHUNT_HUGEPAGES'] and h[0]['set'] and h[0]['value'] == 'maybe' and not h[0]['valid'] and 'auto' in h[0]['accepted'], h" "${TMPDIR:-/tmp}/shunt-info-json.$$"
jsonchk "-l lists the vq provider, usable, alias shm" "
p = [x for x in d['providers'] if x['name'] == 'vq'][0]
assert p['usable'] and p['aliases'] == ['shm'] and p['origin'] == 'builtin', p" -l
jsonchk "-p shm -e rdm: one offer, FI_EP_RDM over FI_PROTO_SHM with its attributes" "
o = d['offers']
assert len(o) == 1 and o[0]['provider'] == 'vq' and o[0]['type'] == 'FI_EP_RDM' and o[0]['protocol'] == 'FI_PROTO_SHM', o
assert 'FI_MSG' in o[0]['caps'] and o[0]['max_msg_size'] > 0 and o[0]['inject_size'] > 0, o" -p shm -e rdm
jsonchk "-p shm -e rdm -v adds fi_tostr's dump" "
assert 'caps:' in d['offers'][0]['fi_tostr'] and 'inject_size' in d['offers'][0]['fi_tostr']" -p shm -e rdm -v
jsonchk "-l -p shm -D -t -H -E: every section in one object" "
assert set(d) == {'providers', 'offers', 'devices', 'topology', 'hugepages', 'env'}, d.keys()
assert len(d['offers']) == 3" -l -p shm -D -t -H -E
"$info" -c FI_RMA -e dgram --json >"${TMPDIR:-/tmp}/shunt-info-json.$$" 2>/dev/null; rc=$?
check "--json with no match: exit 61 and an empty offer list" bash -c "test $rc -eq 61 && python3 -c 'import json,sys; assert json.load(open(sys.argv[1])) == {\"offers\": []}' '${TMPDIR:-/tmp}/shunt-info-json.$$'"
rm -f "${TMPDIR:-/tmp}/shunt-info-json.$$"
# --live: option errors (the live view itself is tested in test_telemetry.sh)
"$info" --live 0 >/dev/null 2>"$err"; rc=$?
check_rc "--live 0 is bad usage" 2
"$info" --count 2 >/dev/null 2>"$err"; rc=$?
check_rc "--count without --live is bad usage" 2
"$info" --live $$ -t >/dev/null 2>"$err"; rc=$?
check_rc "--live with another section is bad usage" 2
"$info" --live $$ --count 1 >/dev/null 2>"${TMPDIR:-/tmp}/shunt-info-live.$$"; rc=$?
check "--live on a process without telemetry: exit 1, says so" bash -c "test $rc -eq 1 && grep -q 'serves no telemetry socket' '${TMPDIR:-/tmp}/shunt-info-live.$$'"
rm -f "${TMPDIR:-/tmp}/shunt-info-live.$$"
for opt in --live --interval --count --json; do
  check "--help documents $opt" grep -q -- "$opt" <<<"$out"
done
check "--env lists SHUNT_TELEMETRY" grep -q '^SHUNT_TELEMETRY ' <<<"$envs"
check "--env lists SHUNT_TELEMETRY_ONE_WAY" grep -q '^SHUNT_TELEMETRY_ONE_WAY ' <<<"$envs"
man_page=$(dirname "$0")/../../doc/man/shunt-info.md
check "doc/man/shunt-info.md's OPTIONS are --help's text" python3 -c "
import sys
s = open(sys.argv[1]).read()
a = s.index('## OPTIONS\n\n\`\`\`\n') + len('## OPTIONS\n\n\`\`\`\n')
page = s[a:s.index('\`\`\`', a)].strip('\n')
help = '\n'.join(l for l in sys.stdin.read().splitlines() if not l.startswith('Usage:')).strip('\n')
assert page == help, 'regenerate the OPTIONS block from --help'" "$man_page" <<<"$out"
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
