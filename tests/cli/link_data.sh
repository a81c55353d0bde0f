#!/usr/bin/env bash
# gt-data import-rec and link-split at the command line, run by ctest as
#   bash tests/cli/link_data.sh GT_DATA
# Good inputs give a one-line summary and a file that gt-data check accepts; every bad input must
# give a nonzero exit status, exactly one line on stderr naming the offending file (and line), and
# no output file (an existing one unchanged). Exits nonzero on the first failed check's summary.
set -u

if [ $# -ne 1 ]; then
  echo "usage: bash $0 GT_DATA" >&2
  exit 2
fi
GT_DATA=$1

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gt_link_data.XXXXXX") || exit 1
FAILED=0

finish() {
  rm -rf "$WORK"
  if [ $FAILED -ne 0 ]; then
    echo "link_data.sh: some checks failed" >&2
    exit 1
  fi
  echo "link_data.sh: all checks passed"
  exit 0
}
trap finish EXIT

fail() {
  echo "FAIL: $*" >&2
  FAILED=1
}

# expect_error NAME STATUS SUBSTRING OUTFILE -- COMMAND... (as tests/cli/bad_input.sh)
expect_error() {
  local name=$1 want=$2 substring=$3 out=$4 failed_before=$FAILED
  FAILED=0
  shift 5
  local err="$WORK/stderr.txt"
  "$@" >"$WORK/stdout.txt" 2>"$err"
  local rc=$?
  if [ "$want" = nonzero ]; then
    [ $rc -ne 0 ] || fail "$name: exit status 0, expected an error"
  else
    [ $rc -eq "$want" ] || fail "$name: exit status $rc, expected $want"
  fi
  local lines
  lines=$(wc -l <"$err")
  [ "$lines" -eq 1 ] || fail "$name: stderr has $lines lines, expected 1: $(cat "$err")"
  grep -qF -- "$substring" "$err" || fail "$name: stderr does not contain '$substring': $(cat "$err")"
  if [ "$out" != - ]; then
    [ ! -e "$out" ] || fail "$name: output file $out exists after the error"
    ls "$out".tmp.* >/dev/null 2>&1 && fail "$name: a temporary file was left: $(ls "$out".tmp.*)"
  fi
  [ $FAILED -ne 0 ] || echo "ok: $name"
  [ $failed_before -eq 0 ] || FAILED=1
}

# --- import-rec ---
mkdir -p "$WORK/rec"
printf '0 0 1 1\n1 2\n' >"$WORK/rec/train.txt"
printf '0 3\n2 2 3\n' | gzip >"$WORK/rec/test.txt.gz"
if "$GT_DATA" import-rec "$WORK/rec" "$WORK/rec.h5" >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"; then
  [ "$(wc -l <"$WORK/stdout.txt")" -eq 1 ] || fail "import-rec: summary is not one line: $(cat "$WORK/stdout.txt")"
  grep -qF "3 users, 4 items, 3 train, 0 valid, 3 test interactions (no valid split" "$WORK/stdout.txt" ||
    fail "import-rec: unexpected summary: $(cat "$WORK/stdout.txt")"
  grep -qF "1 duplicate items dropped" "$WORK/stdout.txt" || fail "import-rec: duplicates not counted: $(cat "$WORK/stdout.txt")"
  "$GT_DATA" info "$WORK/rec.h5" >"$WORK/info.txt" 2>&1 || fail "info of an import-rec file failed: $(cat "$WORK/info.txt")"
  grep -qF "kinds:     user 3 [0, 3) item 4 [3, 7)" "$WORK/info.txt" || fail "info: no kinds: $(cat "$WORK/info.txt")"
  grep -qF "link:      test 3 train 3 (user -> item pairs)" "$WORK/info.txt" || fail "info: no link: $(cat "$WORK/info.txt")"
  "$GT_DATA" check "$WORK/rec.h5" >"$WORK/check.txt" 2>&1 || fail "check of an import-rec file failed: $(cat "$WORK/check.txt")"
  echo "ok: import-rec, info and check"
else
  fail "import-rec failed: $(cat "$WORK/stderr.txt")"
fi

mkdir -p "$WORK/badline"
printf '0 1\n1 2 x\n' >"$WORK/badline/train.txt"
printf '0 2\n' >"$WORK/badline/test.txt"
expect_error "import-rec: a bad item id" 1 "[at $WORK/badline/train.txt:2]" "$WORK/out1.h5" -- \
  "$GT_DATA" import-rec "$WORK/badline" "$WORK/out1.h5"
printf '0 1\n1 2\n' | gzip >"$WORK/badline/train.txt.gz"
rm "$WORK/badline/train.txt"
printf '0 2\n-4 1\n' >"$WORK/badline/test.txt"
expect_error "import-rec: a negative user id" 1 "test.txt:2]" "$WORK/out2.h5" -- \
  "$GT_DATA" import-rec "$WORK/badline" "$WORK/out2.h5"
mkdir -p "$WORK/notest"
printf '0 1\n' >"$WORK/notest/train.txt"
expect_error "import-rec: no test file" 1 "notest/test.txt" "$WORK/out3.h5" -- \
  "$GT_DATA" import-rec "$WORK/notest" "$WORK/out3.h5"
expect_error "import-rec: a valid fraction of 1.5" 1 "[0, 1)" "$WORK/out4.h5" -- \
  "$GT_DATA" import-rec "$WORK/rec" "$WORK/out4.h5" --valid-fraction 1.5 --seed 1
expect_error "import-rec: one argument" 2 "import-rec needs DIR and OUT.h5" - -- "$GT_DATA" import-rec "$WORK/rec"
# A failed import leaves an existing output as it was.
cp "$WORK/rec.h5" "$WORK/keep.h5"
printf '0 1\n1 2 x\n' >"$WORK/badline/test.txt"
"$GT_DATA" import-rec "$WORK/badline" "$WORK/keep.h5" >/dev/null 2>&1 && fail "import-rec of a bad folder succeeded"
cmp -s "$WORK/rec.h5" "$WORK/keep.h5" || fail "a failed import-rec changed the existing output"

# --- link-split ---
"$GT_DATA" synth "$WORK/g.h5" --nodes 300 --avg-degree 6 --features 4 --undirected >/dev/null 2>&1 ||
  fail "synth --undirected failed"
if "$GT_DATA" link-split "$WORK/g.h5" "$WORK/l.h5" --valid 0.1 --test 0.2 --seed 3 --negatives 2 \
  >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"; then
  grep -qF "negatives" "$WORK/stdout.txt" || fail "link-split: unexpected summary: $(cat "$WORK/stdout.txt")"
  "$GT_DATA" check "$WORK/l.h5" >"$WORK/check.txt" 2>&1 || fail "check of a link-split file failed: $(cat "$WORK/check.txt")"
  "$GT_DATA" link-split "$WORK/g.h5" "$WORK/l2.h5" --valid 0.1 --test 0.2 --seed 3 --negatives 2 >/dev/null 2>&1
  cmp -s "$WORK/l.h5" "$WORK/l2.h5" || fail "link-split: the same seed gave other bytes"
  echo "ok: link-split and check"
else
  fail "link-split failed: $(cat "$WORK/stderr.txt")"
fi
printf 'not hdf5\n' >"$WORK/junk.h5"
expect_error "link-split: input not HDF5" 1 "not an HDF5 file" "$WORK/out5.h5" -- \
  "$GT_DATA" link-split "$WORK/junk.h5" "$WORK/out5.h5"
"$GT_DATA" synth "$WORK/d.h5" --nodes 100 --features 2 >/dev/null 2>&1 || fail "synth failed"
expect_error "link-split: a directed input" 1 "directed graph" "$WORK/out6.h5" -- \
  "$GT_DATA" link-split "$WORK/d.h5" "$WORK/out6.h5"
expect_error "link-split: fractions leave no train edges" 1 "test fraction" "$WORK/out7.h5" -- \
  "$GT_DATA" link-split "$WORK/g.h5" "$WORK/out7.h5" --valid 0.6 --test 0.5
expect_error "link-split: a link dataset" 1 "already a link dataset" "$WORK/out8.h5" -- \
  "$GT_DATA" link-split "$WORK/rec.h5" "$WORK/out8.h5"
expect_error "link-split: a bad --negatives" 2 "invalid value 'two' for --negatives" "$WORK/out9.h5" -- \
  "$GT_DATA" link-split "$WORK/g.h5" "$WORK/out9.h5" --negatives two
