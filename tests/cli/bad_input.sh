#!/usr/bin/env bash
# Bad-input behaviour of the command-line programs, run by ctest as
#   bash tests/cli/bad_input.sh GT_DATA GT_TRAIN SOURCE_DIR
# Every bad input must give a nonzero exit status, exactly one line on stderr that names the
# offending file, and no output file. Exits nonzero with a message on the first failed check.
set -u

if [ $# -ne 3 ]; then
  echo "usage: bash $0 GT_DATA GT_TRAIN SOURCE_DIR" >&2
  exit 2
fi
GT_DATA=$1
GT_TRAIN=$2
SOURCE_DIR=$3

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gt_bad_input.XXXXXX") || exit 1
FAILED=0

# The summary runs at exit, so that cases appended at the end of this file are counted too.
finish() {
  rm -rf "$WORK"
  if [ $FAILED -ne 0 ]; then
    echo "bad_input.sh: some checks failed" >&2
    exit 1
  fi
  echo "bad_input.sh: all checks passed"
  exit 0
}
trap finish EXIT

fail() {
  echo "FAIL: $*" >&2
  FAILED=1
}

# expect_error NAME STATUS SUBSTRING OUTFILE -- COMMAND...
# Runs COMMAND; checks its exit status (STATUS, or any nonzero status for "nonzero"), that stderr
# is one line containing SUBSTRING, and that OUTFILE (if not "-") does not exist afterwards.
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
    [ ! -e "$out.tmp" ] || fail "$name: temporary file $out.tmp exists after the error"
  fi
  [ $FAILED -ne 0 ] || echo "ok: $name"
  [ $failed_before -eq 0 ] || FAILED=1
}

# A small valid OGB folder: 5 nodes, a 5-cycle, 3 features, 2 classes.
make_ogb() {
  local dir=$1
  mkdir -p "$dir/raw" "$dir/split/random"
  printf '5\n' | gzip >"$dir/raw/num-node-list.csv.gz"
  printf '5\n' | gzip >"$dir/raw/num-edge-list.csv.gz"
  printf '0,1\n1,2\n2,3\n3,4\n4,0\n' | gzip >"$dir/raw/edge.csv.gz"
  printf '1,0,0\n0,1,0\n0,0,1\n1,1,0\n0,1,1\n' | gzip >"$dir/raw/node-feat.csv.gz"
  printf '0\n1\n0\n1\n-1\n' | gzip >"$dir/raw/node-label.csv.gz"
  printf '0\n1\n' | gzip >"$dir/split/random/train.csv.gz"
  printf '2\n' | gzip >"$dir/split/random/valid.csv.gz"
  printf '3\n' | gzip >"$dir/split/random/test.csv.gz"
}

# --- gt-data cases ---
make_ogb "$WORK/good"
if "$GT_DATA" import-ogb "$WORK/good" "$WORK/good.h5" >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"; then
  [ -s "$WORK/good.h5" ] || fail "good import: no output file"
  [ ! -s "$WORK/stderr.txt" ] || fail "good import: unexpected stderr: $(cat "$WORK/stderr.txt")"
  "$GT_DATA" info "$WORK/good.h5" >"$WORK/info.txt" 2>&1 || fail "info of a good file failed: $(cat "$WORK/info.txt")"
  grep -q "edges: *10" "$WORK/info.txt" || fail "info: expected 10 directed edges: $(cat "$WORK/info.txt")"
  grep -qF "features:  3 per node: float32 [5, 3], chunked (5 x 3 per chunk), uncompressed, 60 bytes stored" \
    "$WORK/info.txt" || fail "info: expected the feature table's type and storage: $(cat "$WORK/info.txt")"
  echo "ok: good import and info"
  if "$GT_DATA" check "$WORK/good.h5" >"$WORK/check.txt" 2>&1; then
    grep -qF "all 15 values finite" "$WORK/check.txt" || fail "check: expected 15 values read: $(cat "$WORK/check.txt")"
    grep -qF "mmap:      yes" "$WORK/check.txt" || fail "check: expected a mappable table: $(cat "$WORK/check.txt")"
    grep -qF "is a valid dataset" "$WORK/check.txt" || fail "check: no verdict: $(cat "$WORK/check.txt")"
    echo "ok: check of a good file"
  else
    fail "check of a good file failed: $(cat "$WORK/check.txt")"
  fi
else
  fail "good import failed: $(cat "$WORK/stderr.txt")"
fi

# A truncated edge file: a large enough stream, cut in the middle.
make_ogb "$WORK/truncated"
seq 0 199999 | awk '{ print ($1 % 5) "," (($1 * 3 + 1) % 5) }' | gzip >"$WORK/edges.gz"
head -c $(($(stat -c %s "$WORK/edges.gz") / 2)) "$WORK/edges.gz" >"$WORK/truncated/raw/edge.csv.gz"
rm "$WORK/truncated/raw/num-edge-list.csv.gz"
expect_error "truncated edge.csv.gz" 1 "truncated/raw/edge.csv.gz:" "$WORK/out1.h5" -- \
  "$GT_DATA" import-ogb "$WORK/truncated" "$WORK/out1.h5"

# An edge file damaged in the middle: the error names the last line decoded before the damage
# (it named line 1 wherever the damage was).
make_ogb "$WORK/corrupt"
seq 0 199999 | awk '{ print ($1 % 5) "," (($1 * 3 + 1) % 5) }' | gzip >"$WORK/corrupt/raw/edge.csv.gz"
rm "$WORK/corrupt/raw/num-edge-list.csv.gz"
SIZE=$(stat -c %s "$WORK/corrupt/raw/edge.csv.gz")
head -c 64 /dev/zero | tr '\0' '\377' |
  dd of="$WORK/corrupt/raw/edge.csv.gz" bs=1 seek=$((SIZE / 2)) conv=notrunc status=none
expect_error "corrupt edge.csv.gz" 1 "corrupt gzip data after line " "$WORK/out8.h5" -- \
  "$GT_DATA" import-ogb "$WORK/corrupt" "$WORK/out8.h5"
grep -q "corrupt gzip data after line [1-9][0-9][0-9][0-9]" "$WORK/stderr.txt" ||
  fail "corrupt edge.csv.gz: not named after a line in the middle: $(cat "$WORK/stderr.txt")"

# A label file with the wrong number of rows.
make_ogb "$WORK/labels"
printf '0\n1\n0\n' | gzip >"$WORK/labels/raw/node-label.csv.gz"
expect_error "label rows != nodes" 1 "labels/raw/node-label.csv.gz" "$WORK/out2.h5" -- \
  "$GT_DATA" import-ogb "$WORK/labels" "$WORK/out2.h5"

# An edge naming node 5 in a 5-node graph (line 3).
make_ogb "$WORK/edgeid"
printf '0,1\n1,2\n2,5\n3,4\n4,0\n' | gzip >"$WORK/edgeid/raw/edge.csv.gz"
expect_error "edge id >= num_nodes" 1 "edgeid/raw/edge.csv.gz:3" "$WORK/out3.h5" -- \
  "$GT_DATA" import-ogb "$WORK/edgeid" "$WORK/out3.h5"

# A folder that does not exist.
expect_error "missing folder" 1 "$WORK/does-not-exist" "$WORK/out4.h5" -- \
  "$GT_DATA" import-ogb "$WORK/does-not-exist" "$WORK/out4.h5"

# An output folder that cannot be made (a file is in the way); a missing one is made.
: >"$WORK/plainfile"
expect_error "output folder under a file" 1 "plainfile" "$WORK/plainfile/sub/out.h5" -- \
  "$GT_DATA" import-ogb "$WORK/good" "$WORK/plainfile/sub/out.h5"
if "$GT_DATA" import-ogb "$WORK/good" "$WORK/new/folder/out.h5" >/dev/null 2>"$WORK/stderr.txt"; then
  [ -s "$WORK/new/folder/out.h5" ] || fail "import into a new folder: no output file"
  echo "ok: missing output folder made"
else
  fail "import into a new folder failed: $(cat "$WORK/stderr.txt")"
fi

# A node in two splits (2 is the valid node), and an empty train split: errors naming the files.
make_ogb "$WORK/overlap"
printf '3\n2\n' | gzip >"$WORK/overlap/split/random/test.csv.gz"
expect_error "overlapping splits" 1 \
  "node 2 is in two splits: '$WORK/overlap/split/random/valid.csv.gz' and '$WORK/overlap/split/random/test.csv.gz' [at $WORK/overlap/split/random/test.csv.gz:2]" \
  "$WORK/out6.h5" -- "$GT_DATA" import-ogb "$WORK/overlap" "$WORK/out6.h5"
make_ogb "$WORK/emptytrain"
printf '' | gzip >"$WORK/emptytrain/split/random/train.csv.gz"
expect_error "empty train split" 1 "the train split '$WORK/emptytrain/split/random/train.csv.gz' lists no nodes" \
  "$WORK/out7.h5" -- "$GT_DATA" import-ogb "$WORK/emptytrain" "$WORK/out7.h5"
compgen -G "$WORK/out[67].h5*" >/dev/null && fail "a failed import left $(echo "$WORK"/out[67].h5*)"

# A missing feature file.
make_ogb "$WORK/nofeat"
rm "$WORK/nofeat/raw/node-feat.csv.gz"
expect_error "missing node-feat.csv.gz" 1 "nofeat/raw/node-feat.csv.gz" "$WORK/out5.h5" -- \
  "$GT_DATA" import-ogb "$WORK/nofeat" "$WORK/out5.h5"

# A failed import leaves an existing output file as it was.
cp "$WORK/good.h5" "$WORK/keep.h5"
"$GT_DATA" import-ogb "$WORK/edgeid" "$WORK/keep.h5" >/dev/null 2>&1 && fail "import over keep.h5 succeeded"
cmp -s "$WORK/good.h5" "$WORK/keep.h5" || fail "a failed import changed the existing output file"
[ ! -e "$WORK/keep.h5.tmp" ] || fail "a failed import left keep.h5.tmp"
echo "ok: existing output kept"

# Files that are not datasets.
echo "not hdf5" >"$WORK/garbage.h5"
expect_error "info of a non-HDF5 file" 1 "$WORK/garbage.h5" - -- "$GT_DATA" info "$WORK/garbage.h5"
expect_error "info of a missing file" 1 "$WORK/missing.h5" - -- "$GT_DATA" info "$WORK/missing.h5"
# The good 5-node import with /features rewritten as float32 [4, 3] through the HDF5 C API
# (tests/preprocess/dataset_test.cc BadFeatureTablesAreNamed makes such files itself).
expect_error "info of a file whose /features has 4 rows for 5 nodes" 1 \
  "/features has 4 rows (shape [4, 3]), but the dataset has 5 nodes (expected [5, 3]) [at $SOURCE_DIR/tests/cli/data/features-4-rows.h5:/features]" - -- \
  "$GT_DATA" info "$SOURCE_DIR/tests/cli/data/features-4-rows.h5"
expect_error "check of a file whose /features has 4 rows for 5 nodes" 1 "/features has 4 rows" - -- \
  "$GT_DATA" check "$SOURCE_DIR/tests/cli/data/features-4-rows.h5"
expect_error "check of a non-HDF5 file" 1 "$WORK/garbage.h5" - -- "$GT_DATA" check "$WORK/garbage.h5"
expect_error "check without a file" 2 "check needs exactly one dataset file" - -- "$GT_DATA" check

# Command-line mistakes are usage errors (status 2).
expect_error "unknown option" 2 "--frobnicate" - -- "$GT_DATA" synth "$WORK/s.h5" --frobnicate 3
expect_error "bad number" 2 "--nodes" - -- "$GT_DATA" synth "$WORK/s.h5" --nodes many
expect_error "missing argument" 2 "import-ogb" - -- "$GT_DATA" import-ogb "$WORK/good"
expect_error "unknown command" 2 "frob" - -- "$GT_DATA" frob
expect_error "bad synth option" 1 "homophily" "$WORK/s.h5" -- "$GT_DATA" synth "$WORK/s.h5" --homophily 2

# --- gt-data: output paths, option parsing, synth options (a reviewer's report) ---
# The output file is one of the inputs: refused before anything is read, the input unchanged.
cp "$WORK/good/raw/edge.csv.gz" "$WORK/edge-before.gz"
expect_error "output is an input" 1 "the output file '$WORK/good/raw/edge.csv.gz' is the input file" - -- \
  "$GT_DATA" import-ogb "$WORK/good" "$WORK/good/raw/edge.csv.gz"
cmp -s "$WORK/good/raw/edge.csv.gz" "$WORK/edge-before.gz" || fail "import-ogb overwrote its input edge.csv.gz"
# Names that cannot be files fail first (before the parse of a bad folder), and a failed run
# takes back the folders it made.
mkdir -p "$WORK/outdir"
expect_error "empty output name" 1 "the output file name is empty" - -- "$GT_DATA" import-ogb "$WORK/edgeid" ""
expect_error "output is a folder" 1 "the output file '$WORK/outdir' is a directory" - -- \
  "$GT_DATA" import-ogb "$WORK/edgeid" "$WORK/outdir"
expect_error "output ends in /" 1 "ends in '/'" - -- "$GT_DATA" import-ogb "$WORK/edgeid" "$WORK/sub2/"
[ ! -e "$WORK/sub2" ] || fail "an output name ending in / made the folder $WORK/sub2"
expect_error "synth output is a folder" 1 "is a directory" - -- "$GT_DATA" synth "$WORK/outdir" --nodes 20000000
make_ogb "$WORK/badfeat"
printf '1,0,0\n0,1\n' | gzip >"$WORK/badfeat/raw/node-feat.csv.gz"
expect_error "failed import in new folders" 1 "badfeat/raw/node-feat.csv.gz:2" "$WORK/nd1/a/b/x.h5" -- \
  "$GT_DATA" import-ogb "$WORK/badfeat" "$WORK/nd1/a/b/x.h5"
[ ! -e "$WORK/nd1" ] || fail "a failed import left the folders it made: $(find "$WORK/nd1")"
# An output that is a symbolic link is written through; the link stays.
mkdir -p "$WORK/store"
ln -s store/real.h5 "$WORK/link.h5"
if "$GT_DATA" import-ogb "$WORK/good" "$WORK/link.h5" >/dev/null 2>"$WORK/stderr.txt"; then
  [ -L "$WORK/link.h5" ] || fail "the output link $WORK/link.h5 was replaced by a file"
  [ -s "$WORK/store/real.h5" ] || fail "the output link's file $WORK/store/real.h5 was not written"
  echo "ok: output through a symbolic link"
else
  fail "import through a symbolic link failed: $(cat "$WORK/stderr.txt")"
fi
# A gzip file with a junk byte between two members is damaged, not a short file.
make_ogb "$WORK/junk"
{ printf '0,1\n1,2\n' | gzip; printf 'x'; printf '2,3\n3,4\n4,0\n' | gzip; } >"$WORK/junk/raw/edge.csv.gz"
expect_error "junk between gzip members" 1 "byte offset" "$WORK/out9.h5" -- \
  "$GT_DATA" import-ogb "$WORK/junk" "$WORK/out9.h5"
grep -qF "junk/raw/edge.csv.gz:2]" "$WORK/stderr.txt" || fail "junk between members: not named at line 2: $(cat "$WORK/stderr.txt")"
# A trailing blank line in node-label.csv.gz is not a label row.
make_ogb "$WORK/blanklabel"
printf '0\n1\n0\n1\n-1\n\n' | gzip >"$WORK/blanklabel/raw/node-label.csv.gz"
"$GT_DATA" import-ogb "$WORK/blanklabel" "$WORK/blank.h5" >/dev/null 2>"$WORK/stderr.txt" &&
  echo "ok: trailing blank label line" || fail "trailing blank label line: $(cat "$WORK/stderr.txt")"

# Command-line parsing: an option twice, an empty --split, a short unknown option, "--".
expect_error "option given twice" 2 "--nodes is given twice" - -- "$GT_DATA" synth "$WORK/s.h5" --nodes 5 --nodes 6
expect_error "empty --split" 2 "--split got an empty name" - -- "$GT_DATA" import-ogb "$WORK/good" "$WORK/s.h5" --split ""
expect_error "short unknown option" 2 "unknown option '-x'" - -- "$GT_DATA" import-ogb "$WORK/good" "$WORK/s.h5" -x
"$GT_DATA" info -- "$WORK/good.h5" >"$WORK/info.txt" 2>&1 && grep -q "nodes: *5" "$WORK/info.txt" &&
  echo "ok: -- ends the options" || fail "info -- FILE: $(cat "$WORK/info.txt")"

# synth options: named by their flags, refused before any work.
expect_error "avg degree below 1" 1 "(--avg-degree) = 0.01 must be in [1," "$WORK/s.h5" -- \
  "$GT_DATA" synth "$WORK/s.h5" --nodes 100 --avg-degree 0.01
expect_error "max degree 0" 1 "--max-degree 0 is not a cap" "$WORK/s.h5" -- "$GT_DATA" synth "$WORK/s.h5" --max-degree 0
expect_error "signal beyond float" 1 "(--signal) = 1e+39 must be in [0, 1e+06]" "$WORK/s.h5" -- \
  "$GT_DATA" synth "$WORK/s.h5" --signal 1e39
expect_error "feature count" 1 "feature_dim (--features) = 0" "$WORK/s.h5" -- "$GT_DATA" synth "$WORK/s.h5" --features 0
# Options within their own bounds whose product no machine has: refused before anything is drawn.
expect_error "synth beyond memory" 1 "of memory; this machine has" "$WORK/s.h5" -- \
  "$GT_DATA" synth "$WORK/s.h5" --nodes 2000000000 --avg-degree 100000
expect_error "synth beyond the disk" 1 "features (average in-degree 15) takes at least" "$WORK/s.h5" -- \
  "$GT_DATA" synth "$WORK/s.h5" --nodes 1000000 --features 16777216
# An exponent just above 1 keeps the mean degree (it was NaN inside, and the degrees far off).
if "$GT_DATA" synth "$WORK/e.h5" --nodes 2000 --avg-degree 5 --features 2 --exponent 1.01 >"$WORK/stdout.txt" 2>&1; then
  grep -qE "mean 4\.[89]|mean 5\.0" "$WORK/stdout.txt" || fail "--exponent 1.01: mean degree off: $(grep edges "$WORK/stdout.txt")"
  echo "ok: --exponent 1.01 keeps the mean degree"
else
  fail "synth --exponent 1.01 failed: $(cat "$WORK/stdout.txt")"
fi
# A tiny graph gets a node in every split; a graph far short of its edges says so on stderr.
if "$GT_DATA" synth "$WORK/tiny.h5" --nodes 4 --avg-degree 1 --classes 2 --features 2 >/dev/null 2>"$WORK/stderr.txt"; then
  "$GT_DATA" info "$WORK/tiny.h5" >"$WORK/info.txt" 2>&1
  grep -qE "splits: *test [1-9][0-9]* train [1-9][0-9]* valid [1-9]" "$WORK/info.txt" ||
    fail "synth --nodes 4: a split is empty: $(grep splits "$WORK/info.txt")"
  echo "ok: synth --nodes 4 fills every split"
else
  fail "synth --nodes 4 failed: $(cat "$WORK/stderr.txt")"
fi
"$GT_DATA" synth "$WORK/sparse.h5" --nodes 100 --classes 100 --homophily 1 --avg-degree 20 --features 2 \
  >/dev/null 2>"$WORK/stderr.txt" || fail "synth with too small classes failed: $(cat "$WORK/stderr.txt")"
grep -q "^gt-data: warning: only [0-9]* of the 2000 edges asked for could be drawn" "$WORK/stderr.txt" &&
  echo "ok: synth warns when edges fall short" || fail "synth: no warning for a short graph: $(cat "$WORK/stderr.txt")"

# --- gt-train cases ---
# (appended by the gt-train side; use expect_error and fail above, and files under $WORK)
# A config that trains on the good 5-node dataset, to which each case adds one mistake.
good_config() {
  cat <<YAML
model: {type: gcn, hidden: 4, layers: 2}
dataset: {path: $WORK/good.h5, train_split: train, valid_split: valid, test_split: test}
sampling: {fanouts: [2, 2], batch_size: 2}
train: {epochs: 2, device: cpu, metrics: $WORK/train/metrics.jsonl, save_best: $WORK/train/best.h5}
YAML
}
good_config >"$WORK/good.yaml"
if "$GT_TRAIN" "$WORK/good.yaml" >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"; then
  [ -s "$WORK/train/metrics.jsonl" ] || fail "good training run wrote no metrics"
  [ -s "$WORK/train/best.h5" ] || fail "good training run saved no model"
  rm -rf "$WORK/train"
  echo "ok: good training run"
else
  fail "good training run failed: $(cat "$WORK/stderr.txt")"
fi

{ good_config; echo "optimizer: {type: adam, lerning_rate: 0.1}"; } >"$WORK/unknown.yaml"
expect_error "unknown config key" 1 "unknown.yaml:5" "$WORK/train/metrics.jsonl" -- "$GT_TRAIN" "$WORK/unknown.yaml"
grep -qF "optimizer.lerning_rate" "$WORK/stderr.txt" || fail "unknown key not named: $(cat "$WORK/stderr.txt")"

{ good_config; echo "optimizer: {lr: fast}"; } >"$WORK/wrongtype.yaml"
expect_error "wrong type" 1 "optimizer.lr' expects a number, got 'fast'" "$WORK/train/metrics.jsonl" -- \
  "$GT_TRAIN" "$WORK/wrongtype.yaml"

expect_error "missing config" 1 "$WORK/nope.yaml" - -- "$GT_TRAIN" "$WORK/nope.yaml"
expect_error "missing dataset" 1 "$WORK/absent.h5" "$WORK/train/metrics.jsonl" -- \
  "$GT_TRAIN" "$WORK/good.yaml" --set dataset.path="$WORK/absent.h5"
expect_error "bad override" 1 "model.depth" "$WORK/train/metrics.jsonl" -- \
  "$GT_TRAIN" "$WORK/good.yaml" --set model.depth=3
expect_error "fanouts vs layers" 1 "sampling.fanouts" "$WORK/train/metrics.jsonl" -- \
  "$GT_TRAIN" "$WORK/good.yaml" --set model.layers=3
expect_error "unknown option" 2 "--frob" - -- "$GT_TRAIN" "$WORK/good.yaml" --frob

# The last --set of a key wins; an earlier value of it is not applied nor range-checked, but a
# malformed one (no '=', YAML that does not parse) is still refused.
expect_error "malformed --set before a good one" 1 "malformed override" "$WORK/train/metrics.jsonl" -- \
  "$GT_TRAIN" "$WORK/good.yaml" --set train.epochs --set train.epochs=3
expect_error "unparseable --set before a good one" 1 "cannot parse value '[1'" "$WORK/train/metrics.jsonl" -- \
  "$GT_TRAIN" "$WORK/good.yaml" --set "train.epochs=[1" --set train.epochs=3
if "$GT_TRAIN" "$WORK/good.yaml" --set train.epochs=0 --set train.epochs=3 --print-config >"$WORK/cfg.txt" \
  2>"$WORK/stderr.txt"; then
  grep -q "^  epochs: 3$" "$WORK/cfg.txt" || fail "the last --set did not win: $(grep epochs "$WORK/cfg.txt")"
  echo "ok: the last --set of a key wins"
else
  fail "--set epochs=0 then epochs=3 failed: $(cat "$WORK/stderr.txt")"
fi

# --trace takes a file name as it is (not YAML: '#' is part of the name); --print-graph
# inspects without checking or creating the run's output folders.
if "$GT_TRAIN" "$WORK/good.yaml" --set train.epochs=1 --trace "$WORK/tr/run #2.json" >/dev/null 2>"$WORK/stderr.txt"; then
  [ -s "$WORK/tr/run #2.json" ] || fail "--trace 'run #2.json' wrote $(ls "$WORK/tr")"
  rm -rf "$WORK/tr" "$WORK/train"
  echo "ok: --trace file name with '#'"
else
  fail "--trace with '#' failed: $(cat "$WORK/stderr.txt")"
fi
if "$GT_TRAIN" "$WORK/good.yaml" --print-graph >"$WORK/graph.txt" 2>"$WORK/stderr.txt"; then
  grep -q "model gcn" "$WORK/graph.txt" || fail "--print-graph printed: $(cat "$WORK/graph.txt")"
  [ ! -e "$WORK/train" ] || fail "--print-graph created the output folder $WORK/train"
  echo "ok: --print-graph writes nothing"
else
  fail "--print-graph failed: $(cat "$WORK/stderr.txt")"
fi
# --print-graph on a recommendation dataset (no node splits): the full-graph LightGCN.
mkdir -p "$WORK/rec"
printf '0 0 1\n1 1 2\n2 0 2\n' >"$WORK/rec/train.txt"
printf '0 2\n1 0\n' >"$WORK/rec/test.txt"
if "$GT_DATA" import-rec "$WORK/rec" "$WORK/rec.h5" >/dev/null 2>"$WORK/stderr.txt" &&
  "$GT_TRAIN" "$SOURCE_DIR/configs/gowalla-lightgcn.yaml" --set dataset.path="$WORK/rec.h5" --set train.device=cpu \
    --print-graph >"$WORK/graph.txt" 2>"$WORK/stderr.txt"; then
  grep -q "model lightgcn (link), full-graph propagation over 6 nodes" "$WORK/graph.txt" &&
    grep -q "LayerReadout mean of 4 layer outputs" "$WORK/graph.txt" || fail "--print-graph on a link dataset printed: $(cat "$WORK/graph.txt")"
  echo "ok: --print-graph on a link dataset"
else
  fail "--print-graph on a link dataset failed: $(cat "$WORK/stderr.txt")"
fi
printf 'model: {type: gcn}\n---\nmodel: {type: sage}\n' >"$WORK/twodocs.yaml"
expect_error "two YAML documents" 1 "this file has another from line 2 [at $WORK/twodocs.yaml:2]" - -- "$GT_TRAIN" "$WORK/twodocs.yaml"
expect_error "device name checked with its line" 1 "train.device must be cpu, cuda, cuda:N or auto, got 'gpu0' [at --set train.device]" \
  "$WORK/train/metrics.jsonl" -- "$GT_TRAIN" "$WORK/good.yaml" --set train.device=gpu0
mkfifo "$WORK/fifo"
expect_error "FIFO as save_best" 1 "exists and is not a regular file" - -- \
  "$GT_TRAIN" "$WORK/good.yaml" --set train.save_best="$WORK/fifo"
[ -p "$WORK/fifo" ] || fail "the FIFO given as train.save_best was replaced"
expect_error "save_best ending in /" 1 "names a folder, not a file" - -- \
  "$GT_TRAIN" "$WORK/good.yaml" --set train.save_best="$WORK/later/"
[ ! -e "$WORK/later" ] || fail "save_best ending in / left the folder $WORK/later"

# --resume with an empty name (an unset variable) or twice is a usage error, not a fresh run.
expect_error "empty --resume" 2 "got an empty name" "$WORK/train/metrics.jsonl" -- "$GT_TRAIN" "$WORK/good.yaml" --resume ""
expect_error "two --resume" 2 "--resume may be given once" "$WORK/train/metrics.jsonl" -- \
  "$GT_TRAIN" "$WORK/good.yaml" --resume a.h5 --resume b.h5
# A YAML comment in a --set value would cut it short (the metrics went to "m").
expect_error "comment in --set" 1 "is a YAML comment" - -- \
  "$GT_TRAIN" "$WORK/good.yaml" --set "train.metrics=$WORK/m #1.jsonl"
# --print-graph reads a cached DKP cost model (and shows its predictions) without writing it.
mkdir -p "$WORK/dkp"
if "$GT_TRAIN" "$WORK/good.yaml" --set train.epochs=4 --set model.dkp=auto --set train.dkp_cache="$WORK/dkp" \
  --set train.dkp_warmup=2 >/dev/null 2>"$WORK/stderr.txt"; then
  CACHE=$(ls "$WORK"/dkp/*.txt 2>/dev/null | head -1)
  if [ -z "$CACHE" ]; then
    fail "model.dkp=auto wrote no cache in $WORK/dkp"
  else
    BEFORE=$(stat -c %Y.%s "$CACHE")
    "$GT_TRAIN" "$WORK/good.yaml" --set model.dkp=auto --set train.dkp_cache="$WORK/dkp" --print-graph >"$WORK/graph.txt" 2>&1 \
      || fail "--print-graph with a DKP cache failed: $(cat "$WORK/graph.txt")"
    grep -q "no fitted cost model" "$WORK/graph.txt" && fail "--print-graph did not read the DKP cache: $(cat "$WORK/graph.txt")"
    [ "$(stat -c %Y.%s "$CACHE")" = "$BEFORE" ] || fail "--print-graph rewrote the DKP cache"
    echo "ok: --print-graph reads the DKP cache"
    # A hand-edited cache is not used: the log says why, naming its line, and the run measures
    # again and rewrites it (it only holds what an earlier run measured).
    sed -i '2s/^\([a-z_]*\) /\1x /' "$CACHE"
    if "$GT_TRAIN" "$WORK/good.yaml" --set train.epochs=4 --set model.dkp=auto --set train.dkp_cache="$WORK/dkp" \
      --set train.dkp_warmup=2 >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"; then
      grep -qF "[at $CACHE:2]: measuring again, and the fit replaces it" "$WORK/stdout.txt" "$WORK/stderr.txt" ||
        fail "edited DKP cache: no warning naming $CACHE:2: $(cat "$WORK/stdout.txt" "$WORK/stderr.txt")"
      sed -n 2p "$CACHE" | grep -q '^[a-z_]*x ' && fail "edited DKP cache: not rewritten: $(sed -n 2p "$CACHE")"
      echo "ok: edited DKP cache"
    else
      fail "edited DKP cache: the run failed: $(cat "$WORK/stderr.txt")"
    fi
  fi
  rm -rf "$WORK/train"
else
  fail "training with model.dkp=auto failed: $(cat "$WORK/stderr.txt")"
fi

# A SIGTERM while gt-data writes a dataset: it dies of the signal (status 143) and leaves neither
# the output nor its temporary file (framework/core/temp_files.h), nor the folders it made for it.
# (SIGINT is ignored by background jobs of a script, so it is the SIGTERM that is sent here;
# framework_test covers SIGINT.)
"$GT_DATA" synth "$WORK/made/for/killed.h5" --nodes 2000000 --features 100 >/dev/null 2>&1 &
SYNTH_PID=$!
SEEN=0
for _ in $(seq 1 1200); do
  if compgen -G "$WORK/made/for/killed.h5.tmp.*" >/dev/null; then
    SEEN=1
    break
  fi
  sleep 0.05
done
kill -TERM "$SYNTH_PID" 2>/dev/null
wait "$SYNTH_PID"
RC=$?
if [ $SEEN -eq 0 ]; then
  fail "SIGTERM: gt-data synth did not start writing made/for/killed.h5 within 60 s (status $RC)"
elif [ $RC -ne 143 ]; then
  fail "SIGTERM: gt-data synth exited with status $RC, expected 143 (killed by SIGTERM)"
elif [ -e "$WORK/made" ]; then
  fail "SIGTERM: gt-data synth left $(find "$WORK/made")"
else
  echo "ok: SIGTERM during a dataset write leaves no temporary file and no folder it made"
fi

# --- gt-data: the output's folder is checked before any work (a user-acceptance report) ---
# A folder that takes no new file failed only when the writer was created: after the whole
# parse (a bad edge file was reported instead), or after drawing the whole graph. /proc takes no
# file even from root; a read-only folder shows the same to other users.
expect_error "import into a folder that takes no file" 1 "cannot write the output file '/proc/gt-bad-input.h5'" \
  /proc/gt-bad-input.h5 -- "$GT_DATA" import-ogb "$WORK/edgeid" /proc/gt-bad-input.h5
expect_error "synth into a folder that takes no file" 1 "cannot write the output file '/proc/gt-bad-input.h5'" \
  /proc/gt-bad-input.h5 -- "$GT_DATA" synth /proc/gt-bad-input.h5 --nodes 2000
[ ! -s "$WORK/stdout.txt" ] || fail "synth into /proc: work began before the output was checked: $(cat "$WORK/stdout.txt")"
if [ "$(id -u)" -ne 0 ]; then  # root may write anywhere
  mkdir "$WORK/ro" && chmod 555 "$WORK/ro"
  expect_error "synth into a read-only folder" 1 "cannot write the output file '$WORK/ro/s.h5': Permission denied" \
    "$WORK/ro/s.h5" -- "$GT_DATA" synth "$WORK/ro/s.h5" --nodes 2000
  [ ! -s "$WORK/stdout.txt" ] || fail "synth into a read-only folder: work began first: $(cat "$WORK/stdout.txt")"
  expect_error "import under a read-only folder" 1 "cannot create folders in '$WORK/ro'" "$WORK/ro/new/g.h5" -- \
    "$GT_DATA" import-ogb "$WORK/edgeid" "$WORK/ro/new/g.h5"
  chmod 755 "$WORK/ro"
  [ -z "$(ls -A "$WORK/ro")" ] || fail "the checks of a read-only folder left $(ls -A "$WORK/ro")"
fi
# The check's probe file is gone after a good run, and the output is there.
if "$GT_DATA" synth "$WORK/probed/s.h5" --nodes 50 --features 2 >/dev/null 2>"$WORK/stderr.txt"; then
  [ "$(ls -A "$WORK/probed")" = s.h5 ] || fail "synth into a new folder left: $(ls -A "$WORK/probed")"
  echo "ok: synth into a new folder leaves its output only"
else
  fail "synth into a new folder failed: $(cat "$WORK/stderr.txt")"
fi

# A malformed info.json is a one-line warning naming it (the dataset name was dropped from the
# source attribute without a word); the import succeeds. A good one is used, silently.
make_ogb "$WORK/badinfo"
printf '{"name": cora}\n' >"$WORK/badinfo/info.json"
if "$GT_DATA" import-ogb "$WORK/badinfo" "$WORK/badinfo.h5" >/dev/null 2>"$WORK/stderr.txt"; then
  [ "$(wc -l <"$WORK/stderr.txt")" -eq 1 ] && grep -qF "gt-data: warning: '$WORK/badinfo/info.json' is malformed" \
    "$WORK/stderr.txt" || fail "malformed info.json: expected one warning naming it: $(cat "$WORK/stderr.txt")"
  [ -s "$WORK/badinfo.h5" ] || fail "malformed info.json: no output file"
  echo "ok: malformed info.json is a warning"
else
  fail "import with a malformed info.json failed: $(cat "$WORK/stderr.txt")"
fi
printf '{"name": "cora", "nodes": 5}\n' >"$WORK/badinfo/info.json"
if "$GT_DATA" import-ogb "$WORK/badinfo" "$WORK/goodinfo.h5" >/dev/null 2>"$WORK/stderr.txt"; then
  [ ! -s "$WORK/stderr.txt" ] || fail "good info.json: unexpected stderr: $(cat "$WORK/stderr.txt")"
  "$GT_DATA" info "$WORK/goodinfo.h5" | grep -q "^source: *cora (OGB raw layout" ||
    fail "good info.json: the name is not in the source: $("$GT_DATA" info "$WORK/goodinfo.h5" | grep source)"
  echo "ok: good info.json names the source"
else
  fail "import with a good info.json failed: $(cat "$WORK/stderr.txt")"
fi

# --- hostile conditions at the programs' level (issue 47, docs/reliability.md) ---
# A file-size limit: a writer past it died of SIGXFSZ with no message and left its temporary file.
expect_error "ulimit -f under gt-data synth" 1 "File too large" "$WORK/fsz.h5" -- \
  bash -c 'ulimit -f 64; exec "$0" synth "$1" --nodes 20000 --features 64' "$GT_DATA" "$WORK/fsz.h5"
ls "$WORK"/fsz.h5.tmp.* >/dev/null 2>&1 && fail "ulimit -f: a temporary file was left: $(ls "$WORK"/fsz.h5.tmp.*)"
# Inputs that are FIFOs waited for a writer for ever (timeout: a hang fails the check, not the suite).
mkfifo "$WORK/in.fifo"
expect_error "config is a FIFO" 1 "config '$WORK/in.fifo' is a FIFO (named pipe), not a regular file" - -- \
  timeout 20 "$GT_TRAIN" "$WORK/in.fifo"
expect_error "dataset is a FIFO" 1 "dataset file '$WORK/in.fifo' is a FIFO (named pipe), not a regular file" - -- \
  timeout 20 "$GT_DATA" info "$WORK/in.fifo"
# A YAML alias bomb (nine levels of nine aliases) ran for minutes; now one line naming its line.
{
  printf 'model:\n  hidden_sizes: [&a0 [x, x, x, x, x, x, x, x, x]'
  for l in 1 2 3 4 5 6 7 8; do
    p=$((l - 1))
    printf ', &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]' $l $p $p $p $p $p $p $p $p $p
  done
  printf ']\n'
} >"$WORK/bomb.yaml"
expect_error "YAML alias bomb" 1 "values with its aliases expanded (an alias-expansion bomb?) [at $WORK/bomb.yaml:2]" - -- \
  timeout 20 "$GT_TRAIN" "$WORK/bomb.yaml"
expect_error "YAML alias bomb in --set" 1 "[at --set sampling.fanouts:1]" - -- \
  timeout 20 "$GT_TRAIN" "$WORK/good.yaml" --set "sampling.fanouts=$(sed -n 's/^  hidden_sizes: //p' "$WORK/bomb.yaml")"
