#!/usr/bin/env bash
# One GPU-machine run on 2 GPUs for jobs of several processes (about 1 minute on 2 H200s).
#
#   OUT=<results folder> bash bench/run.sh jobs
#
# Assumes (the lead's devrun layout): binaries gt-train gt-data gt-bench models_test framework_test
# in devrun/bin, their shared libraries in devrun/lib. Runs the 2-GPU test cases; one process with
# 2 replicas against a job of 2 processes (scripts/launch-local.sh: the TCP rendezvous, NCCL between
# the processes); the job with the processes disagreeing on a key; one process killed mid-run (the
# launcher stops the other); early stopping across processes; gt-bench allreduce over NCCL.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/gpu-run-jobs}
source bench/lib.sh
nvidia-smi -L
for t in models_test framework_test; do
  step "$t"
  run 300 $t.log "$B/$t"
  grep -E "^\[  (PASSED|FAILED) |^\[==========\]" "$OUT/$t.log" | tail -3
  grep -E "^\[  FAILED  \]" "$OUT/$t.log" | sort -u | head -10
  grep -E "^\[  SKIPPED \]" "$OUT/$t.log" | sort -u | head -5
done
W=$(mktemp -d)
$B/gt-data synth $W/d.h5 --nodes 20000 > /dev/null
common="--set dataset.path=$W/d.h5 --set train.device=cuda --set train.dkp_cache= --set train.progress=false --set train.save_best="
losses() { python3 -c "import json,sys; print([round(json.loads(l)['loss'],5) for l in open(sys.argv[1])])" "$1"; }
step "one process, 2 replicas, 4 epochs"
$B/gt-train configs/default.yaml $common --set train.replicas=2 --set train.epochs=4 --set train.metrics=$W/r2.jsonl > $OUT/r2.log 2>&1; echo "exit $?"
grep -E "^training|best valid" $OUT/r2.log; losses $W/r2.jsonl
step "two processes (launch-local.sh), 4 epochs"
timeout 300 bash scripts/launch-local.sh 2 $B/gt-train configs/default.yaml $common --set train.epochs=4 --set train.metrics=$W/p2.jsonl > $OUT/p2.log 2>&1; echo "exit $?"
grep -E "training|best valid" $OUT/p2.log | head -4; losses $W/p2.jsonl
step "two processes disagreeing on train.seed"
timeout 120 bash scripts/launch-local.sh 2 bash -c 'x=; [ "$GT_RANK" = 1 ] && x="--set train.seed=1"; exec "$0" "$@" $x' \
  $B/gt-train configs/default.yaml $common --set train.epochs=2 --set train.metrics= > $OUT/dis.log 2>&1; echo "exit $?"
grep -iE "error|seed" $OUT/dis.log | head -4
step "rank 1 killed after ~6 s of a long run: the launcher stops rank 0"
s0=$(date +%s)
timeout 200 bash scripts/launch-local.sh 2 bash -c 'if [ "$GT_RANK" = 1 ]; then exec timeout -s KILL 6 "$@"; else exec "$@"; fi' \
  launch $B/gt-train configs/default.yaml $common --set train.epochs=500 --set train.metrics= > $OUT/kill.log 2>&1; echo "exit $? after $(( $(date +%s) - s0 )) s"
tail -4 $OUT/kill.log
step "early stopping across two processes (lr 0: no improvement after epoch 1, patience 2)"
timeout 200 bash scripts/launch-local.sh 2 $B/gt-train configs/default.yaml $common --set train.epochs=20 --set optimizer.lr=0 \
  --set train.patience=2 --set train.metrics=$W/es.jsonl > $OUT/es.log 2>&1; echo "exit $?"
grep -E "early stop|best valid" $OUT/es.log | head -4
step "gt-bench allreduce over NCCL, 2 GPUs"
run 200 ar.log $B/gt-bench allreduce --gpus 2 --sizes-kb 64,1024,16384 --iters 20; tail -8 $OUT/ar.log
