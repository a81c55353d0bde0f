#!/usr/bin/env bash
# One GPU-machine run for issue 5's dynamic kernel placement (a few minutes on an H100).
#
#   OUT=<results folder> bash scripts/gpu_run_dkp.sh      # from the repository root
#
# Assumes the lead's devrun layout: gt-bench, gt-train and models_test in devrun/bin, their shared
# libraries in devrun/lib. Writes logs and JSON under $OUT; each step has its own time limit and a
# failing step does not stop the others.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-run-dkp}
source scripts/gpu_common.sh

step "tests: both GCN orders agree on the GPU (and CPU), fit, cache, config"
run 180 dkp_test.log "$B/models_test" --gtest_filter='Dkp*'
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" "$OUT/dkp_test.log" | head -20

step "gt-bench dkp: GCN step with aggregate-first, combine-first, auto (fitted on the same batch)"
run 420 bench_dkp.log "$B/gt-bench" dkp --device cuda --iters 20 --warmup 8 --json "$OUT/bench_dkp.jsonl"
cat "$OUT/bench_dkp.log"

step "done in $(( $(date +%s) - T0 )) s"
