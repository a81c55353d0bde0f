#!/usr/bin/env bash
# One GPU-machine run for the full-batch regime (Cornell5, Twitch-DE): models_test, then each
# model's epoch with train.keep_full_batch false and true, and for GCN, GraphSAGE and GIN also
# combine-first (model.dkp) (30 epochs, no evaluation, median of epochs 2-30, stage times),
# PyG's full-batch step for the same models (bench/baselines/pyg_models.py),
# and GraphSAGE's 5-seed accuracy with the batch kept (about 2.5 minutes on an H100).
#
#   OUT=<results folder> bash bench/run.sh fullbatch
#
# Assumes (the lead's devrun layout): binaries gt-train gt-data models_test in devrun/bin, their
# shared libraries in devrun/lib (or devrun/lib.tar.xz), the OGB raw folders of Cornell5 and
# Twitch-DE at devrun/data/cornell5 and devrun/data/twitch-de, PyTorch + PyG on the machine.
set -u
cd "$(dirname "$0")/../.."
[ -f devrun/lib.tar.xz ] && tar -C devrun -xJf devrun/lib.tar.xz
OUT=${OUT:-out/gpu-run-fullbatch}
source bench/lib.sh
step "tests"
run 400 models_test.log $B/models_test
grep -E "^\[  (PASSED|FAILED) |^\[==========\]" "$OUT/models_test.log" | tail -3; grep -E "^\[  FAILED  \]" "$OUT/models_test.log" | sort -u | head
grep -E "KeptFullBatch" "$OUT/models_test.log" | tail -2
for d in cornell5 twitch-de; do $B/gt-data import-ogb devrun/data/$d data/$d.h5 > /dev/null || echo "!!! import $d"; done
step "epochs: kept full batch vs prepared each epoch (30 epochs, no evaluation; median of epochs 2-30)"
full="--set train.device=cuda --set sampling.batch_size=20000 --set sampling.fanouts=[-1,-1] --set sampling.eval_fanouts=[] --set train.save_best= --set train.progress=false --set train.dkp_cache= --set train.epochs=30 --set train.eval_every=0"
gat="--set model.hidden=8 --set model.dropout=0.6 --set model.attn_dropout=0.6 --set optimizer.lr=0.005"
for d in cornell5 twitch-de; do
  for m in gcn sage gin ngcf gat; do
    extra=""; [ $m = gat ] && extra="$gat"
    variants="false/aggregate-first true/aggregate-first"
    case $m in gcn|sage|gin) variants="$variants true/combine-first";; esac
    for v in $variants; do
      k=${v%/*} o=${v#*/}
      $B/gt-train configs/cornell5-sage.yaml $full $extra --set dataset.path=data/$d.h5 --set model.type=$m --set train.keep_full_batch=$k --set model.dkp=$o --set train.metrics=$OUT/m.jsonl > $OUT/run.log 2>&1 || tail -2 $OUT/run.log
      python3 - "$OUT/m.jsonl" "$d $m keep=$k $o" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
late = rows[1:]
f = lambda k: st.median(r[k] for r in late)
print(f"{sys.argv[2]:44s} epoch {1e3*f('epoch_s'):6.2f} ms (first {1e3*rows[0]['epoch_s']:6.2f})  S {f('sample_ms'):.2f} R {f('reindex_ms'):.2f} K {f('lookup_ms'):.2f} T {f('transfer_ms'):.2f} fw {f('forward_ms'):.2f} bw {f('backward_ms'):.2f}  h2d {f('h2d_bytes')/1e6:.1f} MB  loss30 {rows[-1]['loss']:.4f}")
PY
    done
  done
done
step "PyG full-batch steps, same GPU"
for d in cornell5 twitch-de; do timeout 300 python3 bench/baselines/pyg_models.py devrun/data/$d --models gcn,sage,gin,ngcf,gat --normalize none --time --seeds 1 2>&1 | grep -E "step|accuracy"; done
step "accuracies (5 seeds, 200 epochs, full batch, kept)"
export GT_TRAIN=$B/gt-train
for d in cornell5 twitch-de; do
  bash bench/run.sh accuracy configs/cornell5-sage.yaml --set dataset.path=data/$d.h5 --set train.device=cuda --set sampling.batch_size=20000 --set sampling.fanouts=[-1,-1] --set sampling.eval_fanouts=[] --set train.epochs=200 --set train.dkp_cache= | tail -1
done
