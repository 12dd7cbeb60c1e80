#!/usr/bin/env bash
# Integration test of an installed Shunt: installs this build once into a
# temporary prefix, checks what was installed (sonames, $ORIGIN RUNPATHs, a
# pkg-config file without DPDK's flags, man pages, the tools starting from
# the prefix and finding the plugins), then builds the examples as three
# downstream projects (CMake, meson, a plain pkg-config Makefile) and runs
# each program: two processes, every byte checked, no LD_LIBRARY_PATH.
# Usage: run.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
step() { echo "== $*"; }
quiet() { # quiet LOG CMD...: run CMD, print LOG's tail only when it fails
  local log=$1
  shift
  "$@" >"$log" 2>&1 || { tail -n 40 "$log"; fail "$*"; }
}
unset LD_LIBRARY_PATH

step "install into a temporary prefix"
quiet "$work/install.log" env DESTDIR="$prefix" meson install -C "$build" --no-rebuild --quiet
read -r root libdir sanitize < <(meson introspect "$build" --buildoptions | python3 -c '
import json,sys
o={x["name"]:x["value"] for x in json.load(sys.stdin)}
print(o["prefix"], o["libdir"], o["b_sanitize"])')
inst="$prefix$root"
lib="$inst/$libdir"

step "sonames and RUNPATHs"
for l in shunt_env shunt_vq shunt_fabric; do
  f=$(readlink -f "$lib/lib$l.so")
  [ -f "$f" ] || fail "lib$l.so not installed in $lib"
  readelf -d "$f" | grep -q "SONAME.*lib$l\.so\.[0-9]" || fail "lib$l has no versioned soname"
  readelf -d "$f" | grep -q 'RUNPATH.*\$ORIGIN' || fail "lib$l has no \$ORIGIN RUNPATH"
done
ls "$lib"/shunt/libshunt_drv_*.so >/dev/null 2>&1 || fail "no driver in the plugin directory $lib/shunt"
ls "$lib"/shunt/libshunt_prov_*.so >/dev/null 2>&1 || fail "no provider in the plugin directory $lib/shunt"
for b in shunt-info shunt-perf; do
  readelf -d "$inst/bin/$b" | grep -q 'RUNPATH.*\$ORIGIN/\.\./' || fail "$b has no \$ORIGIN-relative RUNPATH"
done
rp=$(readelf -d "$inst/bin/shunt-info" | sed -n 's/.*RUNPATH.*\[\(.*\)\]/\1/p')
tr ':' '\n' <<<"$rp" | grep -qv '^\$ORIGIN' && fail "shunt-info's RUNPATH has an absolute entry: $rp"

step "installed tools start and find the plugins"
out=$("$inst/bin/shunt-info" -l -D 2>&1) || { echo "$out"; fail "installed shunt-info does not run"; }
grep -q 'shm0' <<<"$out" || { echo "$out"; fail "installed shunt-info sees no shm0 device"; }
"$inst/bin/shunt-perf" --version | grep -q "$(meson introspect "$build" --projectinfo | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')" ||
  fail "installed shunt-perf --version"

step "pkg-config file"
pcdir=$(dirname "$(find "$inst" -name shunt.pc | head -n1)")
[ -d "$pcdir" ] || fail "shunt.pc not installed"
export PKG_CONFIG_PATH="$pcdir:${PKG_CONFIG_PATH:-}"
cflags=$(pkg-config --cflags shunt)
libs=$(pkg-config --libs shunt)
grep -q -- '-lshunt_fabric' <<<"$libs" || fail "pkg-config --libs lacks -lshunt_fabric: $libs"
grep -qE 'rte_config|march|libnl|dpdk' <<<"$cflags $libs" && fail "pkg-config leaks DPDK's flags: $cflags $libs"
grep -q -- "-I$inst/" <<<"$cflags" || fail "pkg-config is not relocated to the prefix: $cflags"

step "man pages and docs"
MANPATH="$inst/share/man" man -P cat shunt-perf 2>/dev/null | grep -q 'pingpong' || fail "man shunt-perf"
MANPATH="$inst/share/man" man -P cat 3 fabric_endpoint 2>/dev/null | grep -qi 'endpoint' || fail "man 3 fabric_endpoint"
[ -f "$inst/share/doc/shunt/LICENSE" ] || fail "LICENSE not installed under share/doc/shunt"

flags=()
cflags_extra=""
# A sanitized Shunt needs a sanitized consumer (the runtime must come first).
if [ "$sanitize" != none ]; then
  cflags_extra="-fsanitize=$sanitize"
fi
export FI_PROVIDER_PATH="$lib/libfabric"

run_examples() { # DIR LABEL
  local d=$1 label=$2 p
  for p in fabric-inject vq-pingpong ofi-hello; do
    timeout 60 "$d/$p" >"$work/$label-$p.log" 2>&1 || { cat "$work/$label-$p.log"; fail "$label: $p"; }
    grep -q 'every byte checked' "$work/$label-$p.log" || { cat "$work/$label-$p.log"; fail "$label: $p checked nothing"; }
  done
  echo "$label consumer: fabric-inject, vq-pingpong, ofi-hello passed"
}
new_project() { # DIR: the consumer's build file(s) and the example sources
  mkdir -p "$1"
  cp "$src"/examples/fabric_inject.cpp "$src"/examples/vq_pingpong.cpp "$src"/examples/ofi_hello.c "$1/"
}

step "CMake consumer"
new_project "$work/cmake"
cp "$src/test/consumer/CMakeLists.txt" "$work/cmake/"
quiet "$work/cmake.log" cmake -S "$work/cmake" -B "$work/cmake/b" -DCMAKE_PREFIX_PATH="$inst" \
  -DCMAKE_CXX_FLAGS="$cflags_extra" -DCMAKE_C_FLAGS="$cflags_extra"
quiet "$work/cmake-build.log" cmake --build "$work/cmake/b"
run_examples "$work/cmake/b" cmake

step "meson consumer"
new_project "$work/meson"
cp "$src/test/consumer/meson.build" "$work/meson/"
quiet "$work/meson.log" env CXXFLAGS="$cflags_extra" CFLAGS="$cflags_extra" LDFLAGS="$cflags_extra" \
  meson setup "$work/meson/b" "$work/meson"
quiet "$work/meson-build.log" ninja -C "$work/meson/b"
run_examples "$work/meson/b" meson

step "Makefile consumer"
new_project "$work/make"
cp "$src/test/consumer/Makefile" "$work/make/"
quiet "$work/make.log" make -C "$work/make" CXXFLAGS="-O2 $cflags_extra" CFLAGS="-O2 $cflags_extra" \
  LDFLAGS="$cflags_extra"
run_examples "$work/make" make
echo "installed consumers OK"
