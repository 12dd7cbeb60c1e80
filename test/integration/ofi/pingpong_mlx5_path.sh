#!/bin/bash
# fi_pingpong over the mlx5 model at one size (pingpong.sh: two processes,
# data checked with -c), then the model's traces of both ports decoded to
# check the send path the provider took (mlx5_trace_paths.py).
# Usage: pingpong_mlx5_path.sh <inline|ring|rndv> <size> <iterations> <shunt_probe> <fi_pingpong> <ep>
set -u
path=$1 size=$2 iters=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SHUNT_MLX5_MODEL_TRACE=$tmp/trace "$here/pingpong.sh" "$@" -d mlx5_model0 -S "$size" -I "$iters"
rc=$?
[ $rc -eq 0 ] || exit $rc
shopt -s nullglob
traces=("$tmp"/trace.*)
[ ${#traces[@]} -ge 2 ] || { echo "FAIL: expected the traces of both ports, found ${#traces[@]}"; exit 1; }
python3 "$here/mlx5_trace_paths.py" "$path" "$size" "$iters" "${traces[@]}"
