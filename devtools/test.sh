#!/usr/bin/env bash
# The test command: installs what the build and tests need, builds in build/
# and runs every test suite; then builds with AddressSanitizer and
# UndefinedBehaviorSanitizer in build-asan/ and runs the suites again
# (SHUNT_TEST_SANITIZE=0 skips that). Ends with one line "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
. devtools/setup.sh

shunt_install_packages || { echo "0 passed, 1 failed"; exit 1; }
shunt_reserve_hugepages

passed=0
failed=0
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
    grep -E -B2 -A40 'FAILED|Failure|ERROR' "$dir.test.log" | head -150 >&2
  fi
  passed=$((passed + ok))
  failed=$((failed + ${fail:-0} + ${timeout:-0}))
}

if shunt_build build; then
  run_suites build release
else
  failed=$((failed + 1))
fi

if [ "${SHUNT_TEST_SANITIZE:-1}" != 0 ]; then
  if shunt_build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug \
    -Dbenchmarks=false; then
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=$PWD/test/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      run_suites build-asan sanitizers
  else
    failed=$((failed + 1))
  fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
