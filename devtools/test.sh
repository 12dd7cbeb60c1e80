#!/usr/bin/env bash
# The test command: installs what the build and tests need, builds in build/
# and runs every test suite; builds with AddressSanitizer and
# UndefinedBehaviorSanitizer in build-asan/ (in the background, meanwhile)
# and runs the suites again (SHUNT_TEST_SANITIZE=0 skips that); SHUNT_TEST_TSAN=1 adds a
# ThreadSanitizer build of the unit and integration suites. With clang, builds the libFuzzer
# harnesses of test/fuzz in build-fuzz/ (ASan+UBSan; in the background while
# the sanitizer suites run) and fuzzes each for
# SHUNT_TEST_FUZZ_SECONDS (default 10) from its committed corpus
# (SHUNT_TEST_FUZZ=0 skips that); a crash, leak or hang fails the run and
# leaves its input in build-fuzz/crashes/. Ends with one line
# "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
. devtools/setup.sh

shunt_install_packages || { echo "0 passed, 1 failed"; exit 1; }
shunt_reserve_hugepages

passed=0
failed=0
# shunt_print_failures JSON: the name and the last lines of the output of
# every test that did not pass (a test's own words: "FAIL: ...", gtest's
# failures, a sanitizer report), from meson's JSON test log.
shunt_print_failures() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    if t.get("result") in ("OK", "SKIP", "EXPECTEDFAIL"):
        continue
    print(f"==== {t['name']}: {t['result']} (exit {t.get('returncode')}, {t.get('duration', 0):.1f} s)")
    out = (t.get("stdout") or "") + (t.get("stderr") or "")
    lines = out.splitlines()
    # gtest's failure lines anywhere, then the end of the output.
    fails = [l for l in lines if "Failure" in l or l.startswith("[  FAILED")]
    for l in fails[:40]:
        print(l)
    print("---- last 60 lines:")
    for l in lines[-60:]:
        print(l)
PY
}
# run_suites DIR LABEL: runs meson test in DIR and adds to the totals.
run_suites() {
  local dir=$1 label=$2
  shunt_log "testing ($label)"
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 1 \
    ${SHUNT_TEST_ARGS:-} >"$dir.test.log" 2>&1
  local rc=$?
  sed -n '/^Summary of Failures/q; /^ *[0-9]*\/[0-9]* /p' "$dir.test.log" >&2
  local ok fail timeout
  ok=$(awk '/^Ok:/ {print $2}' "$dir.test.log")
  fail=$(awk '/^Fail:/ {print $2}' "$dir.test.log")
  timeout=$(awk '/^Timeout:/ {print $2}' "$dir.test.log")
  if [ -z "$ok" ]; then
    tail -n 40 "$dir.test.log" >&2
    failed=$((failed + 1))
    return
  fi
  if [ "$rc" -ne 0 ]; then
    shunt_print_failures "$dir/meson-logs/testlog.json" >&2
  fi
  passed=$((passed + ok))
  failed=$((failed + ${fail:-0} + ${timeout:-0}))
}

# build_fuzzers: configure build-fuzz/ and build the harnesses (only them and
# what they link); the tail of a failing step's log on stderr.
fuzz_harnesses=(fuzz-shm-ring fuzz-shm-peer fuzz-wire fuzz-cm fuzz-ethdev-rx fuzz-vq-post fuzz-fi-ep)
build_fuzzers() {
  local dir=build-fuzz re=
  [ -f "$dir/build.ninja" ] && re=--reconfigure
  if ! CC=clang CXX=clang++ meson setup $re "$dir" -Dfuzz=true -Db_sanitize=address,undefined \
    -Db_lundef=false -Dbuildtype=debug -Dtests=false -Dbenchmarks=false >"$dir.setup.log" 2>&1; then
    tail -n 40 "$dir.setup.log" >&2
    return 1
  fi
  if ! ninja -C "$dir" "${fuzz_harnesses[@]/#/test/fuzz/}" >"$dir.ninja.log" 2>&1; then
    tail -n 60 "$dir.ninja.log" >&2
    return 1
  fi
}
# The harnesses build in the background, in the idle class like the
# sanitizer build, while the sanitizer suites run (they leave CPU time, as
# the release suites do); the fuzzing itself runs after them, alone.
fuzz_pid=
fuzz_wanted=0
if [ "${SHUNT_TEST_FUZZ:-1}" != 0 ]; then
  if command -v clang++ >/dev/null 2>&1; then
    fuzz_wanted=1
  else
    shunt_log "clang++ not found: fuzzing skipped"
  fi
fi
start_fuzz_build() {
  [ "$fuzz_wanted" = 1 ] || return 0
  (
    chrt --idle -p 0 "$BASHPID" >/dev/null 2>&1 || renice -n 19 -p "$BASHPID" >/dev/null 2>&1
    build_fuzzers
  ) >build-fuzz.build.log 2>&1 &
  fuzz_pid=$!
  trap 'pkill -TERM -P "$fuzz_pid" 2>/dev/null; kill "$fuzz_pid" 2>/dev/null; exit 130' INT TERM
}
# fuzz_one HARNESS SECS: fuzz one harness for a bounded time; its log in
# build-fuzz/HARNESS.log, a crash's input in build-fuzz/crashes/.
fuzz_one() {
  local dir=build-fuzz f=$1 secs=$2
  mkdir -p "$dir/corpus/$f"
  ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$dir/test/fuzz/$f" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$dir/crashes/$f-" "$dir/corpus/$f" "test/fuzz/corpus/$f" >"$dir/$f.log" 2>&1
}
# run_fuzzers: wait for the harnesses and fuzz each for a bounded time, two
# at a time (one per core: a fuzzing process keeps one core busy with its
# inputs; the mlx5 model's device thread in fuzz-vq-post sleeps while idle),
# so a pair takes the time of one; each harness counts as one test.
run_fuzzers() {
  local dir=build-fuzz secs=${SHUNT_TEST_FUZZ_SECONDS:-10} i f
  shunt_log "fuzzing: ${#fuzz_harnesses[@]} harnesses, ${secs}s each, two at a time"
  wait "$fuzz_pid"
  local rc=$?
  trap - INT TERM
  if [ "$rc" -ne 0 ]; then
    cat build-fuzz.build.log >&2
    failed=$((failed + 1))
    return
  fi
  mkdir -p "$dir/crashes"
  local rcs=()
  for ((i = 0; i < ${#fuzz_harnesses[@]}; i += 2)); do
    local pids=()
    for f in "${fuzz_harnesses[@]:i:2}"; do
      fuzz_one "$f" "$secs" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do
      wait "$p"
      rcs+=($?)
    done
  done
  for i in "${!fuzz_harnesses[@]}"; do
    f=${fuzz_harnesses[i]}
    if [ "${rcs[i]}" -eq 0 ]; then
      passed=$((passed + 1))
    else
      tail -n 40 "$dir/$f.log" >&2
      shunt_log "$f failed: its input is in $dir/crashes/; fix the bug and add the input to test/fuzz/corpus/$f/"
      failed=$((failed + 1))
    fi
  done
}

release_built=0
shunt_build build && release_built=1

# The sanitizer build runs in the background beside the release tests
# (after the release build: two meson configures at once trip over each
# other), in the idle scheduling class (SCHED_IDLE; nice 19 where chrt
# cannot set it), so it only takes CPU time the tests leave. They leave
# most of a core (they wait on peers, timeouts and system calls), so it is
# usually done when they are and adds little to the run's time. The tests
# run about a sixth slower beside it; none of them times itself. Its
# progress and errors are printed when it is waited for.
asan_pid=
if [ "${SHUNT_TEST_SANITIZE:-1}" != 0 ]; then
  (
    chrt --idle -p 0 "$BASHPID" >/dev/null 2>&1 || renice -n 19 -p "$BASHPID" >/dev/null 2>&1
    shunt_build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug \
      -Dbenchmarks=false
  ) >build-asan.build.log 2>&1 &
  asan_pid=$!
  # Interrupted, the run takes the background build down with it (its
  # ninja stops the compilers it started).
  trap 'pkill -TERM -P "$asan_pid" 2>/dev/null; kill "$asan_pid" 2>/dev/null; exit 130' INT TERM
fi

if [ "$release_built" = 1 ]; then
  run_suites build release
else
  failed=$((failed + 1))
fi

if [ -n "$asan_pid" ]; then
  shunt_log "waiting for the sanitizer build (started in the background)"
  wait "$asan_pid"
  asan_rc=$?
  trap - INT TERM
  cat build-asan.build.log >&2
  # (A ThreadSanitizer build comes next, and two meson configures at once
  # trip over each other: the harnesses wait for it then.)
  [ "${SHUNT_TEST_TSAN:-0}" = 1 ] || start_fuzz_build
  if [ "$asan_rc" -eq 0 ]; then
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=$PWD/test/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      run_suites build-asan sanitizers
  else
    failed=$((failed + 1))
  fi
fi

# ThreadSanitizer, on request (SHUNT_TEST_TSAN=1): a third full build does
# not fit CI's time. Builds build-tsan/ and runs the unit and integration
# suites under it, each with three times its meson timeout
# (SHUNT_TEST_TSAN_TIMEOUT_MULTIPLIER): instrumented code runs several
# times slower, shunt-perf's end-to-end test longest. A report fails the
# suite.
if [ "${SHUNT_TEST_TSAN:-0}" = 1 ]; then
  if shunt_build build-tsan -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debug -Dbenchmarks=false; then
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
      SHUNT_TEST_ARGS="--suite unit --suite integration -t ${SHUNT_TEST_TSAN_TIMEOUT_MULTIPLIER:-3}" \
      run_suites build-tsan thread
  else
    failed=$((failed + 1))
  fi
fi

[ -z "$fuzz_pid" ] && start_fuzz_build
[ "$fuzz_wanted" = 1 ] && run_fuzzers

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
