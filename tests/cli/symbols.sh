#!/usr/bin/env bash
# The shared library exports the public API only, run by ctest as
#   bash tests/cli/symbols.sh LIBGRAPHTENSOR_SO
# Reads the dynamic symbol table (nm -D --defined-only, demangled) and fails on any exported symbol
# outside namespace gt, or inside an internal namespace of it (gt::detail, gt::<name>_detail, an
# anonymous namespace). Prints the number of exported symbols (docs/library.md records it).
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: bash $0 LIBGRAPHTENSOR_SO" >&2
  exit 2
fi
LIB=$1
[ -f "$LIB" ] || { echo "FAIL: no library at $LIB" >&2; exit 1; }
# "ADDRESS TYPE NAME" (the name may contain spaces); absolute symbols (A: the end of data and of
# bss, which the linker defines in every shared library) are left out.
names=$(nm -D --defined-only -C "$LIB" | awk '$2 != "A" { sub(/^[^ ]* [^ ]* /, ""); print }')
count=$(grep -c . <<<"$names" || true)
# Each name's entity, qualified: the special symbols' prefix removed (vtable for X -> X), operators
# named by < and > masked, template arguments removed (innermost first, until none is left), then
# what comes before the parameter list, without the return type.
qualified=$(sed -E \
  -e 's/^(vtable for |VTT for |construction vtable for |typeinfo name for |typeinfo for |guard variable for |non-virtual thunk to |virtual thunk to |covariant return thunk to )//' \
  -e 's/operator(<<=|>>=|<<|>>|<=>|<=|>=|->\*|->|<|>)/operatorX/g' \
  -e ':strip' -e 's/<[^<>]*>//g' -e 't strip' \
  -e 's/\(.*//' -e 's/.* //' <<<"$names")
mapfile -t bad < <(paste -d '\t' <(echo "$names") <(echo "$qualified") | awk -F '\t' '
  $2 !~ /^gt::/ || $2 ~ /(^|::)([A-Za-z0-9_]*_)?detail::/ || $1 ~ /\(anonymous namespace\)/ { print $1 }')
if [ ${#bad[@]} -gt 0 ]; then
  printf '  %s\n' "${bad[@]}" >&2
  echo "FAIL: $LIB exports ${#bad[@]} symbol(s) outside the public API (above; of $count)" >&2
  exit 1
fi
[ $count -gt 0 ] || { echo "FAIL: $LIB exports no symbol at all" >&2; exit 1; }
echo "symbols.sh: $LIB exports $count symbols, all in namespace gt's public API"
