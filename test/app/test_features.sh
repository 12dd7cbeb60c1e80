#!/usr/bin/env bash
# Every cell of doc/guides/features.md against what this build answers:
# getinfo through shunt-info -p/-e/-c for providers, the operation table of
# shunt-info -D for drivers. Usage: test_features.sh SOURCE_ROOT SHUNT_INFO
set -uo pipefail
doc=$1/doc/guides/features.md
info=$2
[ -f "$doc" ] || { echo "FAIL no $doc"; exit 1; }
fails=0 cells=0
dev=$("$info" -D 2>/dev/null)
section=""
caps=()
while IFS= read -r line; do
  case $line in
  '## Providers'*) section=prov ;;
  '## Drivers'*) section=drv ;;
  '| endpoint |'* | '| QP type |'*)
    IFS='|' read -r -a caps <<<"${line// /}"
    continue ;;
  '| ---'*) continue ;;
  '| '*)
    IFS='|' read -r -a row <<<"${line// /}"
    key=${row[1]}
    for ((i = 2; i < ${#row[@]}; i++)); do
      want=${row[$i]} cap=${caps[$i]}
      [ -n "$want" ] || continue
      if [ "$section" = prov ]; then
        "$info" -p shm -e "$key" -c "$cap" >/dev/null 2>&1 && got=yes || got=no
      else
        ops=$(awk -v t="$key" '$1 == t {for (i = 2; i <= NF; i++) print $i}' <<<"$dev")
        grep -qx "$cap" <<<"$ops" && got=yes || got=no
      fi
      cells=$((cells + 1))
      if [ "$got" != "$want" ]; then
        echo "FAIL $section $key $cap: the table says $want, the build says $got"
        fails=$((fails + 1))
      fi
    done ;;
  esac
done <"$doc"
echo "$cells cells checked, $fails wrong"
[ "$cells" -ge 30 ] || { echo "FAIL too few cells read from $doc"; exit 1; }
[ "$fails" -eq 0 ]
