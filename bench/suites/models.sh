#!/usr/bin/env bash
# One GPU-machine run for issue 3's models and benchmarks (about 6 minutes on an H100).
#
#   OUT=<results folder> bash bench/run.sh models
#
# Assumes (the lead's devrun layout): binaries gt-train gt-data gt-bench kernels_test models_test in
# devrun/bin, their shared libraries in devrun/lib, Cora in OGB raw layout at devrun/data/cora,
# shared/bench/pyg_baseline.py copied to devrun/pyg_baseline.py, PyTorch + PyG on the machine.
# Writes logs, JSON and compare.md under $OUT; every step has its own time limit and a failing
# step does not stop the others. Order: tests, Cora accuracy (ours, then PyG), benchmarks.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/gpu-run-models}
source bench/lib.sh

step "tests: models_test (NGCF/GIN/GAT gradients, ELU, GPU vs CPU) and kernels_test (dense, elementwise)"
run 240 models_test.log "$B/models_test" --gtest_filter='ModelGradients*:ModelRegistry*:ModelOps*:ModelsTrainTest*'
grep -E "elements, relative|^\[  (PASSED|FAILED|SKIPPED) |Failure" "$OUT/models_test.log" | head -40
run 120 kernels_test.log "$B/kernels_test" --gtest_filter='Linear*:Apply*:Relu*:LeakyRelu*:Elementwise*:FusedGat*:FusedNgcf*:Pull*'
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" "$OUT/kernels_test.log" | head -20

step "Cora: import, then 5 seeds per model on the GPU (bench/run.sh accuracy)"
run 60 import.log "$B/gt-data" import-ogb devrun/data/cora data/cora.h5 && tail -2 "$OUT/import.log"
export GT_TRAIN=$B/gt-train
for m in ngcf gin gat; do
  run 150 "accuracy-$m.log" bash bench/run.sh accuracy "configs/cora-$m.yaml" --set train.device=cuda
  tail -6 "$OUT/accuracy-$m.log"
done

step "Cora with PyG (bench/baselines/pyg_models.py, same models and hyper-parameters, 5 seeds)"
run 200 pyg_models.log python3 bench/baselines/pyg_models.py devrun/data/cora --json "$OUT/pyg_models.json"
grep -E "loaded|mean test|Error|error" "$OUT/pyg_models.log"

step "gt-bench kernels (Pull fwd/bwd vs device copy) and step (gcn, sage, ngcf; float32 and TF32)"
# Pull on rows as training stores them (dataset.align_rows, 128-byte rows: the comparison), then on
# F-wide rows as pyg_baseline.py's (the path a caller with unpadded tensors gets; not compared).
run 120 gt-kernels.log "$B/gt-bench" kernels --align --json "$OUT/gt-kernels.jsonl"; cat "$OUT/gt-kernels.log"
run 120 gt-kernels-fwide.log "$B/gt-bench" kernels; grep "_fwd" "$OUT/gt-kernels-fwide.log"
run 150 gt-step.log "$B/gt-bench" step --json "$OUT/gt-step.jsonl"; cat "$OUT/gt-step.log"
run 120 gt-step-tf32.log "$B/gt-bench" step --tf32 --json "$OUT/gt-step-tf32.jsonl"; cat "$OUT/gt-step-tf32.log"
# The same steps with kernel placement (model.dkp=auto: fitted on 8 warm-up steps, then timed).
run 150 gt-step-auto.log "$B/gt-bench" step --dkp auto --json "$OUT/gt-step-auto.jsonl"; cat "$OUT/gt-step-auto.log"
run 150 gt-step-tf32-auto.log "$B/gt-bench" step --tf32 --dkp auto --json "$OUT/gt-step-tf32-auto.jsonl"
cat "$OUT/gt-step-tf32-auto.log"

step "pyg_baseline.py (ceilings, cuSPARSE SpMM, steps), then the TF32 steps if time allows"
run 200 pyg.log python3 devrun/pyg_baseline.py --json "$OUT/pyg.json"; tail -20 "$OUT/pyg.log"
PYG_FILES="$OUT/pyg.json"
GT_FILES="$OUT/gt-kernels.jsonl $OUT/gt-step.jsonl"
if [ $(( $(date +%s) - T0 )) -lt 380 ]; then
  run 100 pyg-tf32.log python3 devrun/pyg_baseline.py --tf32 --no-ceilings --json "$OUT/pyg-tf32.json" \
    && PYG_FILES="$PYG_FILES $OUT/pyg-tf32.json" && GT_FILES="$GT_FILES $OUT/gt-step-tf32.jsonl"
  tail -12 "$OUT/pyg-tf32.log"
else
  echo "skipping the TF32 PyG run (time)"
fi

step "comparison (bench/baselines/bench_compare.py)"
existing() { for f in "$@"; do [ -s "$f" ] && echo "$f"; done; }
# shellcheck disable=SC2046
python3 bench/baselines/bench_compare.py --gt $(existing $GT_FILES) --pyg $(existing $PYG_FILES) > "$OUT/compare.md" 2>&1
cat "$OUT/compare.md"
step "done"
