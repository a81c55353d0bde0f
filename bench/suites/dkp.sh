#!/usr/bin/env bash
# One GPU-machine run for issue 5's dynamic kernel placement (a few minutes on an H100).
#
#   OUT=<results folder> bash bench/run.sh dkp
#
# Assumes the lead's devrun layout: gt-bench, gt-data and models_test in devrun/bin, their shared
# libraries in devrun/lib, Cora, Cornell5 and Twitch-DE in OGB raw layout under devrun/data/. Writes logs and JSON under $OUT; each step has its own time limit and a
# failing step does not stop the others.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/gpu-run-dkp}
source bench/lib.sh

step "tests: both orders agree for GCN, GraphSAGE and GIN on the GPU (and CPU), fit, cache, config"
run 180 dkp_test.log "$B/models_test" --gtest_filter='Dkp*'
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" "$OUT/dkp_test.log" | head -20

step "gt-bench dkp: gcn, sage, gin steps with aggregate-first, combine-first, auto (fitted on the same batch)"
run 420 bench_dkp.log "$B/gt-bench" dkp --device cuda --model gcn,sage,gin,ngcf --iters 20 --warmup 8 \
  --json "$OUT/bench_dkp.jsonl"
cat "$OUT/bench_dkp.log"
step "gt-bench dkp with TF32 dense math (GEMMs ~3x faster: combining first pays on narrower gaps)"
run 420 bench_dkp-tf32.log "$B/gt-bench" dkp --device cuda --tf32 --model gcn,sage,gin,ngcf --iters 20 --warmup 8 \
  --json "$OUT/bench_dkp-tf32.jsonl"
cat "$OUT/bench_dkp-tf32.log"

step "gt-bench dkp on the first training batch of Cora, Cornell5 and Twitch-DE (fanouts 10,10 and full neighbourhoods)"
for d in cora cornell5 twitch-de; do
  run 60 "import-$d.log" "$B/gt-data" import-ogb "devrun/data/$d" "$OUT/$d.h5" || continue
  run 120 "bench_dkp-$d.log" "$B/gt-bench" dkp --device cuda --dataset "$OUT/$d.h5" --model gcn,sage,gin,ngcf \
    --iters 20 --warmup 8 --json "$OUT/bench_dkp-$d.jsonl"
  tail -3 "$OUT/bench_dkp-$d.log"
  # Full neighbourhoods (fanouts -1): the first 1024-seed batch and the whole train split.
  for bs in 1024 1000000; do
    run 120 "bench_dkp-$d-full-$bs.log" "$B/gt-bench" dkp --device cuda --dataset "$OUT/$d.h5" --fanouts -1,-1 \
      --batch "$bs" --model gcn,sage,gin,ngcf --iters 20 --warmup 8 --json "$OUT/bench_dkp-$d-full-$bs.jsonl"
    tail -3 "$OUT/bench_dkp-$d-full-$bs.log"
  done
  rm -f "$OUT/$d.h5"
done

step "done in $(( $(date +%s) - T0 )) s"
