#!/usr/bin/env bash
# gt-predict end to end, run by ctest as
#   bash tests/cli/predict.sh GT_DATA GT_TRAIN GT_PREDICT
# Trains a small model with train.save_best, predicts the test split and every node, and checks
# that the accuracy printed is the run's "test at best", that the CSV holds one line per node with
# the argmax of its logits, and that bad arguments are one-line errors that write nothing.
# Exits nonzero with a message on the first failed check.
set -u

if [ $# -ne 3 ]; then
  echo "usage: bash $0 GT_DATA GT_TRAIN GT_PREDICT" >&2
  exit 2
fi
GT_DATA=$1
GT_TRAIN=$2
GT_PREDICT=$3

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gt_predict.XXXXXX") || exit 1
trap 'rc=$?; chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"; exit $rc' EXIT
die() {
  echo "FAIL: $*" >&2
  exit 1
}

"$GT_DATA" synth "$WORK/data.h5" --nodes 900 --avg-degree 6 --features 12 --classes 3 --seed 8 >/dev/null ||
  die "gt-data synth failed"
cat >"$WORK/train.yaml" <<YAML
model: {type: sage, hidden: 16, layers: 2}
dataset: {path: $WORK/data.h5}
sampling: {fanouts: [5, 5], batch_size: 128, eval_fanouts: [4, 4], eval_batch_size: 100}
train: {epochs: 4, device: cpu, progress: false, metrics: $WORK/m.jsonl, save_best: $WORK/best.h5,
        checkpoint: $WORK/ckpt.h5}
YAML
"$GT_TRAIN" "$WORK/train.yaml" >"$WORK/train.log" 2>&1 || die "training failed: $(cat "$WORK/train.log")"
# "best valid 0.6933 at epoch 3, test 0.6800"
want=$(sed -n 's/^best valid .* test \([0-9.]*\)$/\1/p' "$WORK/train.log")
[ -n "$want" ] || die "no best line in the training log: $(cat "$WORK/train.log")"

# --- the test split, from the best-model file: the run's test accuracy ---
"$GT_PREDICT" "$WORK/best.h5" "$WORK/out/test.csv" --device cpu >"$WORK/p.log" 2>&1 ||
  die "gt-predict failed: $(cat "$WORK/p.log")"
grep -q "accuracy $want on " "$WORK/p.log" || die "expected the run's test accuracy $want: $(cat "$WORK/p.log")"
# the same draws whatever the batch size
"$GT_PREDICT" "$WORK/best.h5" "$WORK/out/test7.csv" --device cpu --batch 7 >"$WORK/p7.log" 2>&1 ||
  die "gt-predict --batch 7 failed: $(cat "$WORK/p7.log")"
grep -q "accuracy $want on " "$WORK/p7.log" || die "--batch 7: expected accuracy $want: $(cat "$WORK/p7.log")"
ntest=$(awk "/nodes \\(split 'test'\\)/ { print \$1; exit }" "$WORK/p.log")
[ -n "$ntest" ] || die "no node count: $(cat "$WORK/p.log")"
[ "$(head -1 "$WORK/out/test.csv")" = "node_id,prediction,logit_0,logit_1,logit_2" ] ||
  die "CSV header: $(head -1 "$WORK/out/test.csv")"
[ "$(($(wc -l <"$WORK/out/test.csv") - 1))" -eq "$ntest" ] || die "CSV rows != $ntest nodes"
# every prediction is the argmax of its logits
awk -F, 'NR > 1 { best = 0; for (j = 1; j < 3; ++j) if ($(3 + j) > $(3 + best)) best = j;
                  if (best != $2) { print "row " NR ": " $0; bad = 1 } } END { exit bad }' "$WORK/out/test.csv" ||
  die "a prediction is not the argmax of its logits"
ls "$WORK/out" | grep -q tmp && die "a temporary file was left: $(ls "$WORK/out")"
echo "ok: test split ($ntest nodes, accuracy $want)"

# --- every node, HDF5, with embeddings; a checkpoint works as the model too ---
"$GT_PREDICT" "$WORK/ckpt.h5" "$WORK/all.h5" --all --embeddings --device cpu --fanouts 3,3 --batch 64 \
  >"$WORK/p.log" 2>&1 || die "gt-predict --all failed: $(cat "$WORK/p.log")"
grep -q "^900 nodes (all)" "$WORK/p.log" || die "expected 900 nodes: $(cat "$WORK/p.log")"
grep -q "embeddings" "$WORK/p.log" || die "embeddings not written: $(cat "$WORK/p.log")"
grep -q "sampled neighbourhoods of --fanouts 3,3, not the model's evaluation fanouts" "$WORK/p.log" ||
  die "sampled fanouts given by --fanouts not said: $(cat "$WORK/p.log")"
[ -s "$WORK/all.h5" ] || die "no HDF5 output"
"$GT_PREDICT" "$WORK/best.h5" "$WORK/emb.csv" --split valid --embeddings --device cpu >/dev/null 2>&1 ||
  die "gt-predict --embeddings (csv) failed"
[ "$(head -1 "$WORK/emb.csv" | tr ',' '\n' | grep -c '^emb_')" -eq 16 ] || die "expected 16 embedding columns"
# full neighbourhoods given as -1 are not called sampled
"$GT_PREDICT" "$WORK/best.h5" "$WORK/full.csv" --fanouts -1,-1 --device cpu >"$WORK/p.log" 2>&1 ||
  die "gt-predict --fanouts -1,-1 failed: $(cat "$WORK/p.log")"
grep -q "sampled" "$WORK/p.log" && die "full neighbourhoods called sampled: $(cat "$WORK/p.log")"
"$GT_PREDICT" "$WORK/best.h5" "$WORK/full.csv" --fanouts all --device cpu >"$WORK/p.log" 2>&1 ||
  die "gt-predict --fanouts all failed: $(cat "$WORK/p.log")"
grep -q "(full neighbourhoods of --fanouts all, not the model's evaluation fanouts)" "$WORK/p.log" ||
  die "--fanouts all not named: $(cat "$WORK/p.log")"
# the default split is the one the run reported as test (dataset.test_split)
"$GT_TRAIN" "$WORK/train.yaml" --set train.epochs=1 --set dataset.test_split=valid --set train.save_best="$WORK/v.h5" \
  --set train.checkpoint= --set train.metrics= >"$WORK/train2.log" 2>&1 || die "training failed: $(cat "$WORK/train2.log")"
"$GT_PREDICT" "$WORK/v.h5" "$WORK/v.csv" --device cpu >"$WORK/p.log" 2>&1 || die "gt-predict failed: $(cat "$WORK/p.log")"
grep -q "split 'valid'" "$WORK/p.log" || die "expected the model's test split 'valid': $(cat "$WORK/p.log")"
echo "ok: all nodes, embeddings, default split"

# --- bad input: one line naming the problem, exit 1 or 2, nothing written ---
expect_error() {  # expect_error CODE TEXT ARGS...
  local code=$1 text=$2
  shift 2
  "$GT_PREDICT" "$@" >"$WORK/out.txt" 2>"$WORK/err.txt"
  local rc=$?
  [ "$rc" -eq "$code" ] || die "gt-predict $*: exit $rc, expected $code: $(cat "$WORK/err.txt")"
  [ "$(wc -l <"$WORK/err.txt")" -eq 1 ] || die "gt-predict $*: expected one line: $(cat "$WORK/err.txt")"
  grep -qF -- "$text" "$WORK/err.txt" || die "gt-predict $*: expected '$text' in: $(cat "$WORK/err.txt")"
}
expect_error 1 "is the model file" "$WORK/best.h5" "$WORK/best.h5"
cp "$WORK/best.h5" "$WORK/best-copy.h5"
cmp -s "$WORK/best.h5" "$WORK/best-copy.h5" || die "the model file changed"
expect_error 1 "is the dataset" "$WORK/best.h5" "$WORK/data.h5"
expect_error 1 "no split 'nosuch'" "$WORK/best.h5" "$WORK/x.csv" --split nosuch --device cpu
grep -q "train, " "$WORK/err.txt" || grep -q "test" "$WORK/err.txt" || die "the dataset's splits not listed"
expect_error 1 "absent.h5" "$WORK/absent.h5" "$WORK/x.csv"
mkdir "$WORK/dir.csv"
expect_error 1 "is a folder" "$WORK/best.h5" "$WORK/dir.csv"
expect_error 2 "must end in .h5, .hdf5 or .csv" "$WORK/best.h5" "$WORK/x.txt"
expect_error 2 "--split is given twice" "$WORK/best.h5" "$WORK/x.csv" --split test --split valid
expect_error 2 "--all and --split" "$WORK/best.h5" "$WORK/x.csv" --all --split test
expect_error 2 "unknown option '--nodes'" "$WORK/best.h5" "$WORK/x.csv" --nodes 1
expect_error 2 "--fanouts needs" "$WORK/best.h5" "$WORK/x.csv" --fanouts 3,x
expect_error 1 "fanouts have 3 entries but the model has 2 layers" "$WORK/best.h5" "$WORK/x.csv" --fanouts 3,3,3 \
  --device cpu
expect_error 2 "give a model file and an output file" "$WORK/best.h5"
expect_error 2 "--threads needs a number in [0, 4096]" "$WORK/best.h5" "$WORK/x.csv" --threads 99999
if [ "$(id -u)" -ne 0 ]; then  # root writes anywhere
  mkdir "$WORK/ro" && chmod a-w "$WORK/ro"
  expect_error 1 "cannot write" "$WORK/best.h5" "$WORK/ro/x.csv"
fi
expect_error 1 "is not a folder" "$WORK/best.h5" "$WORK/data.h5/sub/x.csv"  # a file where a folder should be
[ -e "$WORK/x.csv" ] && die "a failed run wrote its output"
[ -e "$WORK/new" ] && die "a failed run left a folder"
expect_error 1 "no split 'nosuch'" "$WORK/best.h5" "$WORK/new/sub/x.csv" --split nosuch --device cpu
[ -e "$WORK/new" ] && die "a failed run left the folders it made for its output"
# an existing output is replaced only when the new one is complete
echo previous >"$WORK/keep.csv"
expect_error 1 "no split 'nosuch'" "$WORK/best.h5" "$WORK/keep.csv" --split nosuch --device cpu
[ "$(cat "$WORK/keep.csv")" = previous ] || die "a failed run changed the existing output"
mkfifo "$WORK/fifo.csv"
expect_error 1 "exists and is not a regular file" "$WORK/best.h5" "$WORK/fifo.csv" --device cpu
[ -p "$WORK/fifo.csv" ] || die "a FIFO at the output path was replaced"
echo "ok: bad input"

# --- outputs that are symbolic links are written through: the files they name are replaced,
# the links stay (gt-train's save_best, checkpoint, trace and metrics; gt-predict) ---
mkdir "$WORK/store" "$WORK/links"
for f in best ckpt trace metrics pred.csv; do
  echo old >"$WORK/store/$f"
  ln -s "../store/$f" "$WORK/links/$f"
done
"$GT_TRAIN" "$WORK/train.yaml" --set train.epochs=1 --set train.save_best="$WORK/links/best" \
  --set train.checkpoint="$WORK/links/ckpt" --set train.metrics="$WORK/links/metrics" \
  --trace "$WORK/links/trace" \
  >"$WORK/links.log" 2>&1 || die "training with linked outputs failed: $(cat "$WORK/links.log")"
"$GT_PREDICT" "$WORK/links/best" "$WORK/links/pred.csv" --device cpu >"$WORK/pl.log" 2>&1 ||
  die "gt-predict through a link failed: $(cat "$WORK/pl.log")"
for f in best ckpt trace metrics pred.csv; do
  [ -L "$WORK/links/$f" ] || die "output '$f' through a symbolic link replaced the link"
  [ "$(head -c 3 "$WORK/store/$f")" != old ] || die "output '$f' through a symbolic link left the file it names unchanged"
done
ls "$WORK/store" "$WORK/links" | grep -q '\.tmp\.' && die "a temporary file was left next to a linked output"
echo "ok: symbolic links"

# --- every node with full neighbourhoods: layer-wise and per-batch inference agree ---
"$GT_PREDICT" "$WORK/best.h5" "$WORK/lw.csv" --all --fanouts all --inference layerwise --device cpu \
  >"$WORK/lw.log" 2>&1 || die "gt-predict --inference layerwise failed: $(cat "$WORK/lw.log")"
grep -q "^inference: layer-wise (--inference = layerwise)" "$WORK/lw.log" || die "no layer-wise line: $(cat "$WORK/lw.log")"
"$GT_PREDICT" "$WORK/best.h5" "$WORK/pb.csv" --all --fanouts all --inference sampled --batch 50 --device cpu \
  >"$WORK/pb.log" 2>&1 || die "gt-predict --inference sampled failed: $(cat "$WORK/pb.log")"
grep -q "^inference: per-batch" "$WORK/pb.log" || die "no per-batch line: $(cat "$WORK/pb.log")"
paste -d, "$WORK/lw.csv" "$WORK/pb.csv" | awk -F, 'NR > 1 { if ($1 != $6 || $2 != $7) { print "row " NR; bad = 1 }
    for (j = 3; j <= 5; ++j) { d = $j - $(j + 5); if (d < 0) d = -d; if (d > 1e-4) { print "row " NR " logit " j; bad = 1 } } }
    END { exit bad }' || die "layer-wise and per-batch predictions differ"
"$GT_PREDICT" "$WORK/best.h5" "$WORK/auto.csv" --all --fanouts all --batch 20 --device cpu >"$WORK/auto.log" 2>&1 ||
  die "gt-predict --inference auto failed: $(cat "$WORK/auto.log")"
grep -q "^inference: layer-wise (auto: 45 batches" "$WORK/auto.log" || die "auto did not choose layer-wise: $(cat "$WORK/auto.log")"
"$GT_PREDICT" "$WORK/best.h5" "$WORK/x.csv" --all --inference layerwise --device cpu >"$WORK/x.log" 2>&1 &&
  die "layer-wise with the model's sampled eval_fanouts was accepted"
grep -q "sampled fanouts are set" "$WORK/x.log" || die "layer-wise with sampled fanouts: $(cat "$WORK/x.log")"
echo "ok: layer-wise inference"
echo "predict.sh: all checks passed"
