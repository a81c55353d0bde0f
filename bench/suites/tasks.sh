#!/usr/bin/env bash
# One GPU-machine run for issue 48 (node tasks, GCN's symmetric normalisation, dkp auto by
# default), beside PyTorch Geometric on the same datasets, for docs/benchmarks.md ("Node tasks"):
#   1. the GPU cases of the new tests (sigmoid loss and metrics kernels' GPU-vs-CPU cases, the
#      symmetric GCN and DKP orders on the GPU, the multi-label GPU-follows-CPU run);
#   2. gt-train on Cora, Cornell5, Twitch-DE (full batch, 2 layers, hidden 64, dropout 0.5, Adam
#      lr 0.01, wd 5e-4, 200 epochs, 5 seeds): GCN symmetric and mean and GraphSAGE as softmax
#      tasks selected by accuracy; GCN and GraphSAGE as binary tasks selected by ROC-AUC;
#      epoch times of model.dkp auto against both fixed orders (bench/run.sh node-tasks,
#      DEVICE=cuda);
#   3. the products preset (GraphSAGE and GCN, sampled mini-batches): epoch time of auto against
#      both fixed orders;
#   4. a synthetic multi-label dataset (112 targets, as ogbn-proteins) on the GPU and the CPU:
#      mean ROC-AUC and micro-F1 of both;
#   5. bench/baselines/pyg_node_tasks.py: PyG's GCNConv and SAGEConv the same way (JSON in
#      $OUT/pyg.json).
#
#   OUT=<results folder> bash bench/run.sh tasks
#
# Assumes the devrun layout (bench/lib.sh): gt-train, gt-data, kernels_test and
# models_test in devrun/bin, their libraries in devrun/lib (or devrun/lib.tar.xz), the OGB raw
# folders at devrun/data/{cora,cornell5,twitch-de} (copies of ../shared/data), PyTorch + PyG.
# About 25 minutes on an H100/H200: split it with STEPS="tests acc" etc. (tests acc auc dkp
# products multilabel pyg).
set -u
cd "$(dirname "$0")/../.."
[ -f devrun/lib.tar.xz ] && tar -C devrun -xJf devrun/lib.tar.xz
OUT=${OUT:-out/gpu-run-tasks}
source bench/lib.sh
STEPS=${STEPS:-"tests acc auc dkp products multilabel pyg"}
has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
export GT_TRAIN=$B/gt-train W=$OUT/work DEVICE=cuda

if has tests; then
  step "tests (GPU cases)"
  run 300 kernels_test.log $B/kernels_test --gtest_filter='SigmoidBce*:Loss*:SoftmaxCrossEntropy*:CountCorrect*'
  run 900 models_test.log $B/models_test --gtest_filter='Task*:Dkp.*:ModelGradients.*:ModelsTrainTest.*'
  for f in kernels_test.log models_test.log; do
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]" "$OUT/$f" | tail -4; grep -E "^\[  FAILED  \]" "$OUT/$f" | sort -u | head
  done
fi
for d in cora cornell5 twitch-de; do
  [ -f data/$d.h5 ] || $B/gt-data import-ogb devrun/data/$d data/$d.h5 > /dev/null || echo "!!! import $d"
done
if has acc; then
  step "accuracy, softmax tasks, 5 seeds: GCN symmetric and mean, GraphSAGE"
  bash bench/run.sh node-tasks acc | tee "$OUT/acc-gcn.txt"
  MODEL=sage bash bench/run.sh node-tasks acc | tee "$OUT/acc-sage.txt"
fi
if has auc; then
  step "binary tasks selected by ROC-AUC, 5 seeds: GCN, GraphSAGE"
  DATASETS="cornell5 twitch-de" bash bench/run.sh node-tasks auc | tee "$OUT/auc-gcn.txt"
  MODEL=sage DATASETS="cornell5 twitch-de" bash bench/run.sh node-tasks auc | tee "$OUT/auc-sage.txt"
fi
if has dkp; then
  step "epoch times: dkp auto (second run, cached fit) vs aggregate-first vs combine-first"
  bash bench/run.sh node-tasks dkp | tee "$OUT/dkp-gcn.txt"
  MODEL=sage bash bench/run.sh node-tasks dkp | tee "$OUT/dkp-sage.txt"
fi
if has products; then
  step "products preset: dkp auto vs both fixed orders (3 epochs, median of epochs 2-3)"
  [ -f data/products.h5 ] || run 900 synth.log $B/gt-data synth data/products.h5 --preset products
  for m in sage gcn; do
    rm -rf "$OUT/products-dkp"
    for o in aggregate-first combine-first auto auto; do
      run 600 products.log $B/gt-train configs/products-sage.yaml --set model.type=$m --set model.dkp=$o \
        --set train.dkp_cache=$OUT/products-dkp --set train.epochs=3 --set train.metrics=$OUT/p.jsonl || continue
      python3 -c 'import json,sys,statistics as s; r=[json.loads(l) for l in open(sys.argv[1])]; print(sys.argv[2], "epochs", " ".join("%.3f" % x["epoch_s"] for x in r), "s; median of 2-3 %.3f s" % s.median(x["epoch_s"] for x in r[1:]))' \
        "$OUT/p.jsonl" "products $m $o"
    done
  done
fi
if has multilabel; then
  step "synthetic multi-label (112 targets, 10% missing): GPU and CPU"
  [ -f data/ml112.h5 ] || $B/gt-data synth data/ml112.h5 --nodes 20000 --avg-degree 15 --features 64 --classes 8 \
    --targets 112 --missing 0.1 > /dev/null
  for dev in cuda cpu; do
    $B/gt-train configs/default.yaml --set dataset.path=data/ml112.h5 --set model.type=gcn --set train.device=$dev \
      --set model.dkp=aggregate-first --set model.dropout=0 --set sampling.fanouts=[-1,-1] --set sampling.batch_size=100000 \
      --set sampling.eval_fanouts=[] --set train.epochs=30 --set train.save_best= --set train.progress=false \
      --set train.metrics=$OUT/ml-$dev.jsonl > "$OUT/ml-$dev.log" 2>&1 || tail -2 "$OUT/ml-$dev.log"
    grep -E "^task|^best" "$OUT/ml-$dev.log"
    python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readlines()[-1]); print(sys.argv[2], "epoch 30: loss %.6f valid roc_auc %.6f micro_f1 %.6f test roc_auc %.6f micro_f1 %.6f" % (r["loss"], r["valid_roc_auc"], r["valid_micro_f1"], r["test_roc_auc"], r["test_micro_f1"]))' \
      "$OUT/ml-$dev.jsonl" "$dev"
  done
fi
if has pyg; then
  step "PyG: GCNConv and SAGEConv, same datasets and settings, 5 seeds"
  run 1800 pyg.log python3 bench/baselines/pyg_node_tasks.py devrun/data --json "$OUT/pyg.json"
  grep -vE '^[ {}\[\]"]' "$OUT/pyg.log" | head -20
fi
step "done"
