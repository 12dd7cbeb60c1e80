#!/bin/bash
# Open MPI over Shunt: runs mpi_test with N ranks through Open MPI's OFI MTL
# (pml cm, tagged messages, and one-sided through osc pt2pt) or OFI BTL
# (pml ob1, send/receive and RMA) on
# the "shunt" provider only, and fails if MPI used anything else.
# Usage: mpi_run.sh <shunt_probe> <mpirun> <mpi_test> <ranks> <mtl|btl>
# Exit 77 (skip) only when Shunt itself offers no RDM endpoint.
set -u
probe=$1
mpirun=$2
prog=$3
ranks=$4
path=$5

"$probe" rdm
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: shunt_probe rdm failed ($rc)"; exit 1; }

# libfabric loads no provider but Shunt, and the component is forced: a
# fallback to another transport cannot happen silently, MPI_Init fails.
export FI_PROVIDER=shunt
case $path in
mtl)
    # The MTL asks for FI_REMOTE_COMM, which a host-local device states
    # only when told that every rank is on this host.
    export SHUNT_VQ_SINGLE_HOST=1
    # One-sided through osc pt2pt, which carries it over the PML, so over
    # Shunt's tagged messages (osc rdma on one host uses shared memory and
    # CPU atomics and would not reach Shunt).
    export MPI_TEST_ONE_SIDED=1
    args=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include shunt --mca mtl_base_verbose 1
          --mca osc pt2pt)
    ;;
btl)
    # btl_ofi_mode 2: send/receive as well as RMA (the default, 0, is
    # one-sided only and leaves ob1 without a path between the ranks).
    args=(--mca pml ob1 --mca btl ofi,self --mca btl_ofi_provider_include shunt --mca btl_ofi_mode 2
          --mca btl_base_verbose 1)
    ;;
*)
    echo "FAIL: unknown path $path"; exit 1 ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Leak checking stays with Shunt's own programs (Open MPI keeps its
# allocations to the end).
# Pass on what is set (mpirun warns about names that are not).
pass=(-x ASAN_OPTIONS=detect_leaks=0)
for v in FI_PROVIDER FI_PROVIDER_PATH FI_LOG_LEVEL SHUNT_VQ_SINGLE_HOST MPI_TEST_ONE_SIDED LD_PRELOAD UBSAN_OPTIONS; do
    [ -n "${!v+set}" ] && pass+=(-x "$v")
done
timeout 300 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" "${args[@]}" \
    "${pass[@]}" "$prog" >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ $rc -eq 0 ] || { echo "FAIL: mpirun exited $rc"; exit 1; }
ok=$(grep -c '^rank [0-9]* ok$' "$tmp/out")
[ "$ok" -eq "$ranks" ] || { echo "FAIL: $ok of $ranks ranks reported ok"; exit 1; }
if [ -n "${MPI_TEST_ONE_SIDED:-}" ]; then
    os=$(grep -c '^rank [0-9]* one-sided ok$' "$tmp/out")
    [ "$os" -eq "$ranks" ] || { echo "FAIL: $os of $ranks ranks reported one-sided ok"; exit 1; }
fi
if [ "$path" = mtl ]; then
    # mtl_ofi_component.c prints the domain of the provider it selected
    sel=$(grep -c 'mtl:ofi:provider: ' "$tmp/out")
    bad=$(grep 'mtl:ofi:provider: ' "$tmp/out" | grep -c 'provider: none')
    [ "$sel" -eq "$ranks" ] && [ "$bad" -eq 0 ] || { echo "FAIL: the OFI MTL was selected on $sel of $ranks ranks"; exit 1; }
else
    # bml names the BTL it uses for every peer: ofi for each other rank
    ofi=$(grep -c 'mca: bml: Using ofi btl for send to' "$tmp/out")
    other=$(grep 'mca: bml: Using ' "$tmp/out" | grep -v -c 'Using ofi btl\|Using self btl')
    want=$((ranks * (ranks - 1)))
    [ "$ofi" -eq "$want" ] && [ "$other" -eq 0 ] || { echo "FAIL: BTL ofi used for $ofi of $want peer pairs ($other others)"; exit 1; }
fi
echo "ok: $ranks ranks over Open MPI's OFI ${path^^} on shunt"
