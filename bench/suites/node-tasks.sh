#!/usr/bin/env bash
# Issue 48's CPU measurements (docs/benchmarks.md, "Node tasks"): on Cora, Cornell5 and Twitch-DE
# (imported to data/NAME.h5 with gt-data import-ogb), full batch as PyG's users train (2 layers,
# hidden 64, dropout 0.5, Adam lr 0.01, wd 5e-4, 200 epochs, test at the best validation epoch):
#   dkp      epoch time of model.dkp auto (second run, cost model from the cache) against both
#            fixed orders: median of epochs 2-30 without evaluation; and the first auto run's
#            extra time (its warm-up times both orders)
#   acc      GCN symmetric vs mean, as 2-class/7-class softmax (model.task multiclass), by accuracy
#   auc      GCN symmetric on the binary datasets as binary (sigmoid) tasks, selected by ROC-AUC
#   [DEVICE=cpu] [SEEDS="0 1 2 3 4"] [TWITCH_SEEDS=...] [DATASETS="cora cornell5 twitch-de"] \
#     bench/run.sh node-tasks [dkp|acc|auc]...
# One line per run; GT_TRAIN overrides build/gt-train; DEVICE=cuda runs the same on the GPU
# (bench/run.sh tasks); MODEL=sage measures GraphSAGE instead of GCN (acc: one line per seed);
# NORMS="mean" limits acc to one GCN normalisation.
set -u
cd "$(dirname "$0")/../.."
G=${GT_TRAIN:-./build/gt-train}
SEEDS=${SEEDS:-"0 1 2 3 4"}
TWITCH_SEEDS=${TWITCH_SEEDS:-$SEEDS}
W=${W:-out/cpu-node-tasks}
DEVICE=${DEVICE:-cpu}
MODEL=${MODEL:-gcn}
DATASETS=${DATASETS:-"cora cornell5 twitch-de"}
threads=""; [ "$DEVICE" = cpu ] && threads="--set train.threads=2"
mkdir -p "$W"
base="--set model.type=$MODEL --set model.hidden=64 --set model.layers=2 --set model.dropout=0.5
  --set sampling.fanouts=[-1,-1] --set sampling.batch_size=100000 --set sampling.eval_fanouts=[]
  --set optimizer.lr=0.01 --set optimizer.weight_decay=0.0005 --set train.device=$DEVICE $threads
  --set train.progress=false --set train.save_best= --set train.metrics=$W/m.jsonl"
norm() { case $1 in cora*) echo row;; *) echo none;; esac; }  # Cora and its one-vs-rest binaries: row-normalised
median() {  # median epoch_s of epochs 2.. of a metrics file, in ms
  python3 -c 'import json,sys,statistics as s; r=[json.loads(l) for l in open(sys.argv[1])][1:]; print("%.1f" % (1e3*s.median(x["epoch_s"] for x in r)))' "$1"
}
for what in "$@"; do
  case $what in
  dkp)
    for d in $DATASETS; do
      rm -rf "$W/dkp-cache"
      for o in aggregate-first combine-first auto auto; do
        t0=$(date +%s.%N)
        $G configs/default.yaml $base --set dataset.path=data/$d.h5 --set dataset.normalize=$(norm $d) \
          --set model.dkp=$o --set train.dkp_cache=$W/dkp-cache --set train.epochs=30 --set train.eval_every=0 \
          > "$W/run.log" 2>&1 || { tail -2 "$W/run.log"; continue; }
        t1=$(date +%s.%N)
        echo "dkp $MODEL $d $o: median epoch $(median $W/m.jsonl) ms, run $(python3 -c "print('%.1f' % ($t1 - $t0))") s, $(grep -c . $W/m.jsonl) epochs"
      done
    done;;
  acc)
    for d in $DATASETS; do
      seeds=$SEEDS; [ $d = twitch-de ] && seeds=$TWITCH_SEEDS
      norms=${NORMS:-"symmetric mean"}; [ "$MODEL" != gcn ] && norms=mean
      for n in $norms; do
        for s in $seeds; do
          r=$($G configs/default.yaml $base --set dataset.path=data/$d.h5 --set dataset.normalize=$(norm $d) \
                --set model.normalization=$n --set model.task=multiclass --set train.epochs=200 --set train.seed=$s \
                --set train.dkp_cache=$W/dkp-cache 2>&1 | grep "^best valid")
          echo "acc $MODEL $d $n seed $s: $r"
        done
      done
    done;;
  auc)
    for d in $DATASETS; do
      [ $d = cora ] && continue  # 7 classes: not a binary task
      seeds=$SEEDS; [ $d = twitch-de ] && seeds=$TWITCH_SEEDS
      for s in $seeds; do
        $G configs/default.yaml $base --set dataset.path=data/$d.h5 --set dataset.normalize=$(norm $d) \
          --set model.task=binary --set train.epochs=200 --set train.seed=$s --set train.dkp_cache=$W/dkp-cache \
          > "$W/run.log" 2>&1
        python3 - "$W/m.jsonl" "auc $MODEL $d seed $s" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
best = max(range(len(rows)), key=lambda i: (rows[i]["valid_roc_auc"] or -1, -i))
b = rows[best]
print(f"{sys.argv[2]}: best epoch {b['epoch']} valid roc_auc {b['valid_roc_auc']:.4f} test roc_auc {b['test_roc_auc']:.4f} test acc {b['test_acc']:.4f}")
PY
      done
    done;;
  *) echo "unknown measurement '$what' (dkp, acc or auc)"; exit 2;;
  esac
done
