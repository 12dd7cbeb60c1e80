#!/usr/bin/env bash
# Integration test: install this build into a temporary prefix, then
# configure, build and run test/consumer with CMake against it, and check the
# pkg-config file too. Usage: run.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
# Install into the temporary prefix without touching the build's own prefix.
DESTDIR="$prefix" meson install -C "$build" --no-rebuild --quiet >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; exit 1; }
read -r root sanitize < <(meson introspect "$build" --buildoptions | python3 -c '
import json,sys
o={x["name"]:x["value"] for x in json.load(sys.stdin)}
print(o["prefix"], o["b_sanitize"])')
flags=()
# A sanitized Shunt needs a sanitized consumer (the runtime must come first).
[ "$sanitize" = none ] || flags=(-DCMAKE_CXX_FLAGS="-fsanitize=$sanitize")
inst="$prefix$root"
cmake -S "$src/test/consumer" -B "$work/b" -DCMAKE_PREFIX_PATH="$inst" "${flags[@]}" >"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log"; exit 1; }
cmake --build "$work/b" >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }
libdir=$(dirname "$(find "$inst" -name 'libshunt_env.so*' | head -n1)")
LD_LIBRARY_PATH="$libdir" "$work/b/consumer"
pc=$(find "$inst" -name shunt.pc | head -n1)
[ -n "$pc" ] || { echo "shunt.pc not installed"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs shunt | grep -q -- '-lshunt_env' ||
  { echo "pkg-config file lacks -lshunt_env"; exit 1; }
echo "cmake consumer and pkg-config file OK"
