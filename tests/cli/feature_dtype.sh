#!/usr/bin/env bash
# 16-bit feature tables end to end, run by ctest as
#   bash tests/cli/feature_dtype.sh GT_DATA GT_TRAIN
# gt-data synth --feature-dtype writes bfloat16 / float16 tables that info and check report;
# gt-data convert round-trips them (bfloat16 -> float32 -> bfloat16 gives the same bytes as a
# bfloat16 -> bfloat16 copy, as widening is exact); a bfloat16 table trains exactly as its float32 widening does, held in
# memory or memory-mapped (the gathered float32 rows are the same); and bad uses are one-line
# errors that write nothing. Exits nonzero with a message on the first failed check.
set -u

if [ $# -ne 2 ]; then
  echo "usage: bash $0 GT_DATA GT_TRAIN" >&2
  exit 2
fi
GT_DATA=$1
GT_TRAIN=$2

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gt_feature_dtype.XXXXXX") || exit 1
trap 'rc=$?; rm -rf "$WORK"; exit $rc' EXIT
die() {
  echo "FAIL: $*" >&2
  exit 1
}
# expect_error NAME STATUS SUBSTRING OUTFILE -- COMMAND...: exit status STATUS, one line on
# stderr containing SUBSTRING, and OUTFILE (unless "-") not written.
expect_error() {
  local name=$1 want=$2 substring=$3 out=$4
  shift 5
  "$@" >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"
  local rc=$?
  [ $rc -eq "$want" ] || die "$name: exit status $rc, expected $want: $(cat "$WORK/stderr.txt")"
  [ "$(wc -l <"$WORK/stderr.txt")" -eq 1 ] || die "$name: stderr is not one line: $(cat "$WORK/stderr.txt")"
  grep -qF -- "$substring" "$WORK/stderr.txt" || die "$name: stderr lacks '$substring': $(cat "$WORK/stderr.txt")"
  if [ "$out" != - ]; then [ ! -e "$out" ] || die "$name: $out was written"; fi
  echo "ok: $name"
}

SYNTH=(--nodes 900 --avg-degree 6 --features 12 --classes 3 --seed 8)
"$GT_DATA" synth "$WORK/bf16.h5" "${SYNTH[@]}" --feature-dtype bf16 >"$WORK/synth.log" 2>&1 ||
  die "gt-data synth --feature-dtype bf16 failed: $(cat "$WORK/synth.log")"
"$GT_DATA" info "$WORK/bf16.h5" >"$WORK/info.log" 2>&1 || die "info failed: $(cat "$WORK/info.log")"
grep -q "^features:  12 per node: bfloat16 \[900, 12\], chunked.* 21600 bytes stored" "$WORK/info.log" ||
  die "info does not show 900 x 12 bfloat16 values in 2 bytes each: $(cat "$WORK/info.log")"
"$GT_DATA" check "$WORK/bf16.h5" >"$WORK/check.log" 2>&1 || die "check failed: $(cat "$WORK/check.log")"
grep -q "900 x 12 bfloat16, all 10800 values finite" "$WORK/check.log" || die "check: $(cat "$WORK/check.log")"
grep -q "^mmap:      yes" "$WORK/check.log" || die "a bfloat16 table can be mapped: $(cat "$WORK/check.log")"
echo "ok: synth, info and check of a bfloat16 table"

"$GT_DATA" synth "$WORK/f16.h5" "${SYNTH[@]}" --feature-dtype float16 >/dev/null 2>&1 || die "synth float16 failed"
"$GT_DATA" info "$WORK/f16.h5" | grep -q "per node: float16 \[900, 12\]" || die "info of the float16 table"
echo "ok: synth of a float16 table"

# --- convert: widening is exact, so bf16 -> float32 -> bf16 is the same file ---
"$GT_DATA" convert "$WORK/bf16.h5" "$WORK/wide.h5" --feature-dtype float32 >"$WORK/conv.log" 2>&1 ||
  die "convert to float32 failed: $(cat "$WORK/conv.log")"
grep -q "per node: float32 \[900, 12\]" "$WORK/conv.log" || die "convert's summary: $(cat "$WORK/conv.log")"
"$GT_DATA" convert "$WORK/wide.h5" "$WORK/back.h5" --feature-dtype bfloat16 >/dev/null 2>&1 ||
  die "convert back to bfloat16 failed"
# (compared with a bfloat16 -> bfloat16 convert: synth lays the file out in another order)
"$GT_DATA" convert "$WORK/bf16.h5" "$WORK/same.h5" --feature-dtype bf16 >/dev/null 2>&1 || die "convert to bf16 failed"
cmp -s "$WORK/same.h5" "$WORK/back.h5" || die "bfloat16 -> float32 -> bfloat16 changed the values"
"$GT_DATA" convert "$WORK/wide.h5" "$WORK/half.h5" --feature-dtype fp16 >/dev/null 2>&1 || die "convert to fp16 failed"
"$GT_DATA" check "$WORK/half.h5" | grep -q "900 x 12 float16" || die "check of the converted float16 table"
ls "$WORK" | grep -q tmp && die "a temporary file was left: $(ls "$WORK")"
echo "ok: convert round trip (bfloat16 -> float32 -> bfloat16 is byte-identical; float16)"

# --- training: a bfloat16 table trains as its float32 widening, in memory or mapped ---
train() {  # train NAME DATA FEATURES: prints the run's "best valid" line
  cat >"$WORK/$1.yaml" <<YAML
model: {type: sage, hidden: 16, layers: 2}
dataset: {path: $2, features: $3, normalize: none}
sampling: {fanouts: [5, 5], batch_size: 128, eval_fanouts: [4, 4], eval_batch_size: 100}
train: {epochs: 3, device: cpu, progress: false, metrics: "", save_best: ""}
YAML
  "$GT_TRAIN" "$WORK/$1.yaml" >"$WORK/$1.log" 2>&1 || die "training $1 failed: $(cat "$WORK/$1.log")"
  grep "^best valid" "$WORK/$1.log" || die "no best line in $1: $(cat "$WORK/$1.log")"
}
a=$(train bf16mem "$WORK/bf16.h5" memory) || exit 1
b=$(train bf16map "$WORK/bf16.h5" mmap) || exit 1
c=$(train wide "$WORK/wide.h5" memory) || exit 1
[ "$a" = "$b" ] || die "bfloat16 in memory ($a) and mapped ($b) trained differently"
[ "$a" = "$c" ] || die "bfloat16 ($a) and its float32 widening ($c) trained differently"
echo "ok: bfloat16 trains as its float32 widening, in memory and mapped ($a)"

# --- errors ---
expect_error "convert onto its input" 1 "are the same file" - -- \
  "$GT_DATA" convert "$WORK/bf16.h5" "$WORK/bf16.h5" --feature-dtype float16
ln -s bf16.h5 "$WORK/link.h5"
expect_error "convert onto its input through a link" 1 "'$WORK/link.h5' are the same file" - -- \
  "$GT_DATA" convert "$WORK/bf16.h5" "$WORK/link.h5" --feature-dtype float16
"$GT_DATA" convert "$WORK/bf16.h5" "$WORK/same2.h5" --feature-dtype bf16 >/dev/null 2>&1 || die "convert failed"
cmp -s "$WORK/same.h5" "$WORK/same2.h5" || die "a refused convert changed its input"
expect_error "convert without --feature-dtype" 2 "convert needs --feature-dtype" "$WORK/x.h5" -- \
  "$GT_DATA" convert "$WORK/bf16.h5" "$WORK/x.h5"
expect_error "unknown feature type" 2 "invalid value 'int8' for --feature-dtype" "$WORK/x.h5" -- \
  "$GT_DATA" synth "$WORK/x.h5" "${SYNTH[@]}" --feature-dtype int8
expect_error "float16 overflow" 1 "outside the range of float16" "$WORK/x.h5" -- \
  "$GT_DATA" synth "$WORK/x.h5" "${SYNTH[@]}" --signal 100000 --feature-dtype float16
expect_error "convert of a missing file" 1 "$WORK/missing.h5" "$WORK/x.h5" -- \
  "$GT_DATA" convert "$WORK/missing.h5" "$WORK/x.h5" --feature-dtype bf16
echo "all feature dtype checks passed"
