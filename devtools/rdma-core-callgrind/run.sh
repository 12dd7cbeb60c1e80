#!/bin/bash
# rdma-core's own mlx5 post and poll code under callgrind, for comparison
# with Shunt's mlx5 driver (test/bench/mlx5_callgrind.cpp; the figures are
# in doc/guides/drivers/mlx5.md).
#
# Usage: devtools/rdma-core-callgrind/run.sh <rdma-core-src> [rounds]
#
# <rdma-core-src>: the rdma-core source tree of the installed libibverbs-dev
# (Debian 12: 44.0; `git clone -b v44.0 https://github.com/linux-rdma/rdma-core`
# or `apt-get source rdma-core`). Its private headers give the struct layouts
# of the code measured, which is the installed static archive libmlx5.a
# itself (qp.c.o and cq.c.o, as Debian compiled them), not a rebuild.
# Needs cmake, ninja, gcc, valgrind and libibverbs-dev; no RDMA device.
set -euo pipefail
src=$(cd "$1" && pwd)
rounds=${2:-10000}
here=$(cd "$(dirname "$0")" && pwd)
archive=/usr/lib/$(gcc -print-multiarch)/libmlx5.a
[ -f "$archive" ] || { echo "no $archive (install libibverbs-dev)" >&2; exit 1; }
have=$(dpkg-query -W -f '${Version}' libibverbs-dev 2>/dev/null | sed 's/-.*//')
want=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$src/CMakeLists.txt")
[ "$have" = "$want" ] || { echo "libibverbs-dev is $have, the source tree is $want: the struct layouts would not match" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Configure only for config.h and the generated headers (kernel-abi/...):
# building the provider's own qp.c object makes ninja generate them.
cmake -S "$src" -B "$work/b" -GNinja -DCMAKE_BUILD_TYPE=Release -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 \
    -DENABLE_RESOLVE_NEIGH=0 -DENABLE_STATIC=1 >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
ninja -C "$work/b" providers/mlx5/CMakeFiles/mlx5-static.dir/qp.c.o >"$work/ninja.log" 2>&1 ||
    { cat "$work/ninja.log"; exit 1; }
cd "$work"
ar x "$archive" qp.c.o cq.c.o
cc -O2 -g -std=gnu11 -I"$work/b/include" -I"$src/providers/mlx5" -I"$src" -c "$here/harness.c" -o harness.o
# What qp.c.o and cq.c.o call outside the measured paths (buffer allocation,
# DEVX, SRQs, ODP, error CQEs) resolves to stubs that abort if ever reached.
: >stubs.c
cc -o harness harness.o qp.c.o cq.c.o 2>link.log || true
sed -n "s/.*undefined reference to \`\([A-Za-z0-9_]*\)'.*/\1/p" link.log | sort -u | while read -r sym; do
    printf 'void %s(void);\nvoid %s(void) { __builtin_trap(); }\n' "$sym" "$sym" >>stubs.c
done
cc -c stubs.c -o stubs.o
cc -o harness harness.o qp.c.o cq.c.o stubs.o
valgrind --tool=callgrind --callgrind-out-file=cg.out --collect-atstart=no --toggle-collect='rc_measure_*' \
    ./harness "$rounds" 2>valgrind.log || { cat valgrind.log; exit 1; }
echo "stubbed (never called): $(grep -c '^void .*{' stubs.c) symbols"
# Instructions per call of each measured function (inclusive), and the
# provider functions under them.
callgrind_annotate --inclusive=yes cg.out 2>/dev/null |
    awk -v n="$rounds" '/rc_measure_|mlx5_/ { c = $1; gsub(",", "", c); sub(/^[^)]*\) */, ""); sub(/ \[.*/, "");
        if (c + 0 >= n) printf "%8.2f  %s\n", c / n, $0 }'
