#!/bin/sh
# Convert one reference page of doc/man (Markdown, first line "# name(N)")
# into a man page with go-md2man. Usage: md2man.sh IN.md OUT.N VERSION
set -eu
in=$1 out=$2 version=$3
title=$(sed -n '1s/^# \([^(]*\)(\([0-9a-z]*\)).*/\1 \2/p' "$in")
[ -n "$title" ] || { echo "$in: first line is not '# name(N)'" >&2; exit 1; }
{ printf '%% %s "Shunt %s"\n' "$title" "$version"; sed 1d "$in"; } | go-md2man >"$out"
