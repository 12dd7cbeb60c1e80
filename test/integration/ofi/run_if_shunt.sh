#!/bin/bash
# Run a libfabric test program only if Shunt (asked directly, below the shim)
# offers the endpoint type; otherwise report skip (77).
# Usage: run_if_shunt.sh <shunt_probe> <rdm|msg|dgram> <program> [args]
probe=$1
ep=$2
shift 2
"$probe" "$ep"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: shunt_probe $ep failed ($rc)"; exit 1; }
exec timeout 120 "$@"
