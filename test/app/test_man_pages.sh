#!/usr/bin/env bash
# Every function declared at namespace scope in the public headers of lib/vq
# and lib/fabric (util/ included; detail/ is internal) must be named in some
# reference page under doc/man/. Prints the missing names and fails if any.
#
# Extraction is a deliberately simple regex: Shunt's headers do not indent
# namespace contents, so a namespace-scope declaration starts in column 0
# ("[[nodiscard]] inline int name(", "const char *name(", "int name(" ...),
# while struct members and function bodies are indented.
set -uo pipefail
root=${1:?usage: test_man_pages.sh SOURCE_ROOT}
man="$root/doc/man"
[ -d "$man" ] || { echo "FAIL no $man"; exit 1; }
shopt -s nullglob
headers=("$root"/lib/vq/*.h "$root"/lib/fabric/*.h "$root"/lib/fabric/util/*.h)
[ ${#headers[@]} -gt 0 ] || { echo "FAIL no public headers under $root/lib"; exit 1; }

names=$(
  grep -hE '^[A-Za-z_[].*\(' "${headers[@]}" |
    sed -E 's/\[\[[^]]*\]\][[:space:]]*//g' |                      # drop [[attributes]]
    grep -vE '^(#|//|/\*|using |namespace |struct |class |enum |template|typedef |static_assert|return |extern "C")' |
    sed -E 's/\(.*//' |                                              # up to the first '('
    grep -vE '=' |                                                   # initialisers, not declarations
    grep -E '[[:space:]*&]~?[A-Za-z_][A-Za-z0-9_]*$' |               # a return type, then the name
    grep -oE '[A-Za-z_][A-Za-z0-9_]*$' |
    sort -u
)
count=$(wc -w <<<"$names")
echo "functions declared in the public headers of lib/vq and lib/fabric: $count"

# The extraction must keep working: a broken regex must not pass vacuously.
fails=0
[ "$count" -ge 200 ] || { echo "FAIL only $count names extracted (expected >= 200): the regex broke"; fails=1; }
for known in wr_start wr_complete poll_cq create_qp getinfo cq_read ep_bind atomicvalid \
             register_provider cq_write av_get mr_verify; do
  grep -qx "$known" <<<"$names" || { echo "FAIL extraction misses $known"; fails=1; }
done

pages=()
for p in "$man"/*.md; do [ "$(basename "$p")" = README.md ] || pages+=("$p"); done   # the index does not count
[ ${#pages[@]} -gt 0 ] || { echo "FAIL no pages in $man"; exit 1; }
missing=()
for n in $names; do
  grep -qw -- "$n" "${pages[@]}" || missing+=("$n")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "FAIL ${#missing[@]} function(s) not named in any doc/man page:"
  printf '  %s\n' "${missing[@]}"
  fails=1
fi
[ $fails -eq 0 ] && echo "ok   every declared function is named in doc/man (${#pages[@]} pages)"
exit $fails
