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
syms=$(nm -D --defined-only -C "$LIB")
bad=()
count=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  # "ADDRESS TYPE NAME"; the name may contain spaces.
  name=${line#* }
  type=${name%% *}
  name=${name#* }
  # Symbols the linker defines itself in every shared library (absolute: end of data, of bss).
  if [ "$type" = A ]; then continue; fi
  count=$((count + 1))
  # The entity a special symbol belongs to.
  entity=$name
  for prefix in 'vtable for ' 'VTT for ' 'construction vtable for ' 'typeinfo name for ' 'typeinfo for ' \
                'guard variable for ' 'non-virtual thunk to ' 'virtual thunk to ' 'covariant return thunk to '; do
    if [[ $entity == "$prefix"* ]]; then entity=${entity#"$prefix"}; break; fi
  done
  # The qualified name: template arguments removed (operators named by < and > first), then what
  # comes before the parameter list, without the return type.
  q=$(sed -E 's/operator(<<=|>>=|<<|>>|<=>|<=|>=|->\*|->|<|>)/operatorX/g' <<<"$entity")
  while [[ $q == *'<'* ]]; do
    next=$(sed -E 's/<[^<>]*>//g' <<<"$q")
    [ "$next" != "$q" ] || break
    q=$next
  done
  q=${q%%(*}
  q=${q##* }
  if [[ $q != gt::* ]] || [[ $q =~ (^|::)(detail|[A-Za-z0-9_]+_detail):: ]] ||
     [[ $name == *'(anonymous namespace)'* ]]; then
    bad+=("$name")
  fi
done <<<"$syms"
if [ ${#bad[@]} -gt 0 ]; then
  printf '  %s\n' "${bad[@]}" >&2
  echo "FAIL: $LIB exports ${#bad[@]} symbol(s) outside the public API (above; of $count)" >&2
  exit 1
fi
[ $count -gt 0 ] || { echo "FAIL: $LIB exports no symbol at all" >&2; exit 1; }
echo "symbols.sh: $LIB exports $count symbols, all in namespace gt's public API"
