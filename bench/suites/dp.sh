#!/usr/bin/env bash
# One run on the 2-GPU machine for issue 7 (data-parallel training over NCCL), about 6 minutes.
#
#   OUT=<results folder> bash bench/run.sh dp
#
# Assumes the devrun layout of docs/benchmarks.md: gt-train gt-data gt-bench framework_test
# models_test in devrun/bin, their libraries in devrun/lib, Cora and Cornell5 (OGB raw layout) in
# devrun/data. Every step has its own time limit; a failing step does not stop the others.
# Order: tests, all-reduce bandwidth, accuracy on 1 and 2 GPUs (threads, then 2 processes),
# products-scale epochs on 1 and 2 GPUs.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/gpu-run-dp}
source bench/lib.sh
nproc

step "tests: collectives (NCCL on 2 GPUs) and data-parallel training (CPU, 1 vs 2 GPUs)"
run 120 comm_test.log "$B/framework_test" --gtest_filter='HostGroup*:Rendezvous*:ProcessGroupEnv*:Nccl*'
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Skipped" "$OUT/comm_test.log" | head
run 300 dp_test.log "$B/models_test" --gtest_filter='DataParallel*:ShardOf*:TrainTest.Gpu*'
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|Failure|Skipped" "$OUT/dp_test.log" | head -20

step "gt-bench allreduce (NCCL, 2 GPUs)"
run 60 allreduce.log "$B/gt-bench" allreduce --gpus 2 --sizes-kb 64,1024,16384,262144 --json "$OUT/allreduce.jsonl"
cat "$OUT/allreduce.log"

step "accuracy: Cora GraphSAGE and Cornell5 GraphSAGE, 5 seeds, 1 GPU vs 2 GPUs (threads)"
run 60 import-cora.log "$B/gt-data" import-ogb devrun/data/cora data/cora.h5
run 120 import-cornell5.log "$B/gt-data" import-ogb devrun/data/cornell5 data/cornell5.h5
export GT_TRAIN=$B/gt-train
for cfg in cora-sage cornell5-sage; do
  for n in 1 2; do
    run 200 "acc-$cfg-$n.log" bash bench/run.sh accuracy "configs/$cfg.yaml" --set train.device=cuda --set train.replicas=$n
    tail -1 "$OUT/acc-$cfg-$n.log"
  done
done

step "2 processes (GT_WORLD_SIZE/GT_RANK rendezvous, one GPU each), Cornell5 seed 0"
for r in 0 1; do
  GT_WORLD_SIZE=2 GT_RANK=$r GT_LOCAL_RANK=$r GT_MASTER_PORT=29611 timeout 120 "$B/gt-train" configs/cornell5-sage.yaml \
    --set train.device=cuda --set train.metrics= --set train.save_best= > "$OUT/procs-$r.log" 2>&1 &
done
wait
tail -3 "$OUT/procs-0.log"; tail -2 "$OUT/procs-1.log"
if command -v mpirun > /dev/null; then
  step "2 processes under mpirun (OMPI_COMM_WORLD_* variables), Cornell5 seed 0"
  run 120 mpirun.log mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x GT_MASTER_PORT=29612 \
    "$B/gt-train" configs/cornell5-sage.yaml --set train.device=cuda --set train.metrics= --set train.save_best=
  grep -E "replicas|best valid|error" "$OUT/mpirun.log" | head -4
fi

step "products scale: synthesize (2.45M nodes, F=100)"
run 240 synth.log "$B/gt-data" synth data/products.h5 --preset products && tail -2 "$OUT/synth.log"
step "products scale: GraphSAGE 3x256 [15,10,5], batch 1024, 3 epochs, 1 GPU then 2 GPUs (GPU cache 1024 MiB each)"
for n in 1 2; do
  run 240 "products-$n.log" "$B/gt-train" configs/products-sage.yaml --set train.epochs=3 --set train.eval_every=3 \
    --set sampling.eval_fanouts=[15,10,5] --set dataset.test_split=valid --set train.gpu_cache_mb=1024 \
    --set train.device=cuda --set train.replicas=$n --set train.metrics="$OUT/products-$n.jsonl"
  grep -E "^training|^epoch|stages|cache|best" "$OUT/products-$n.log"
done
step "done"
