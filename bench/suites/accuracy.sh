#!/usr/bin/env bash
# Mean test accuracy (at the best validation epoch) over 5 seeds for a config: the last field of
# "best valid", the test value of train.select_by (accuracy for multiclass tasks; ROC-AUC for
# binary and multilabel ones unless set: docs/tasks.md).
#   bench/run.sh accuracy CONFIG [--set key=value]...
# Prints one line per seed and the mean; writes nothing else.
set -euo pipefail
cd "$(dirname "$0")/../.."
config=$1; shift
sum=0
for seed in 0 1 2 3 4; do
  acc=$("${GT_TRAIN:-./build/gt-train}" "$config" --set train.seed=$seed --set train.metrics= --set train.save_best= \
        --set train.progress=false "$@" | awk '/^best valid/ {print $NF}')
  echo "seed $seed: test $acc"
  sum=$(awk -v s="$sum" -v a="$acc" 'BEGIN {print s + a}')
done
awk -v s="$sum" -v c="$config" 'BEGIN {printf "%s: mean test accuracy over 5 seeds %.4f\n", c, s / 5}'
