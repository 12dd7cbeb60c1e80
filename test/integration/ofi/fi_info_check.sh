#!/bin/bash
# fi_info through libshunt-fi.so: the "shunt" provider is listed with every
# endpoint type Shunt offers, and the attributes libfabric prints are the ones
# Shunt reports (shunt_probe asks Shunt directly, below the shim).
# Usage: fi_info_check.sh <shunt_probe> <fi_info>   (FI_PROVIDER_PATH set by meson)
# Exit 77 (skip) only when Shunt itself has no provider at all.
set -u
probe=$1
fi_info=$2
fail() { echo "FAIL: $*"; exit 1; }

offered=()
for t in rdm msg dgram; do
    "$probe" "$t" >/dev/null
    case $? in
    0) offered+=("$t") ;;
    77) echo "note: Shunt offers no $t endpoint" ;;
    *) fail "shunt_probe $t failed" ;;
    esac
done
if [ ${#offered[@]} -eq 0 ]; then
    echo "SKIP: Shunt has no provider (no RDM, MSG or DGRAM endpoint from shunt::fabric::getinfo)"
    exit 77
fi

list=$(FI_LOG_LEVEL=warn timeout 60 "$fi_info" -l 2>&1) || fail "fi_info -l failed: $list"
grep -q '^shunt:' <<<"$list" || fail "fi_info -l does not list shunt (FI_PROVIDER_PATH=$FI_PROVIDER_PATH): $list"

short=$(timeout 60 "$fi_info" -p shunt 2>&1) || fail "fi_info -p shunt failed: $short"
grep -q '^provider: shunt$' <<<"$short" || fail "no 'provider: shunt' in: $short"

for t in "${offered[@]}"; do
    T=FI_EP_${t^^}
    out=$(timeout 60 "$fi_info" -p shunt -t "$T" 2>&1) || fail "fi_info -p shunt -t $T failed: $out"
    grep -q "type: $T\$" <<<"$out" || fail "fi_info -p shunt -t $T lists no $T: $out"
    grep -q '^provider: shunt$' <<<"$out" || fail "fi_info -p shunt -t $T: provider is not shunt: $out"

    # Attributes of the first answer, compared with Shunt's own first answer.
    verbose=$(timeout 60 "$fi_info" -p shunt -t "$T" -v 2>&1) || fail "fi_info -v failed"
    first=$(awk '/^---$/ { n++; next } n == 1' <<<"$verbose")
    [ -n "$first" ] || fail "fi_info -v printed no info for $T"
    expected=$("$probe" "$t" --attrs) || fail "shunt_probe $t --attrs failed"
    caps_line=$(grep -m1 '^ *caps:' <<<"$first")
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        case $line in
        cap:*)
            cap=${line#cap: }
            grep -qw -- "$cap" <<<"$caps_line" || fail "$T: capability $cap of Shunt missing from fi_info caps: $caps_line"
            ;;
        *)
            grep -qx -- " *$line" <<<"$first" || fail "$T: fi_info lacks '$line' (Shunt's value); fi_info printed:
$first"
            ;;
        esac
    done <<<"$expected"
    echo "ok: $T listed by fi_info -p shunt with Shunt's attributes"
done
# An endpoint type Shunt does not offer must not be invented by the shim.
for t in rdm msg dgram; do
    case " ${offered[*]} " in *" $t "*) continue ;; esac
    out=$(timeout 60 "$fi_info" -p shunt -t "FI_EP_${t^^}" 2>&1) && fail "fi_info lists FI_EP_${t^^} that Shunt does not offer: $out"
done
exit 0
