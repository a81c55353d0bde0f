#!/usr/bin/env bash
# The one runner of the measurement suites (bench/README.md):
#
#   bash bench/run.sh SUITE [ARGS...]    # from any folder; the suite runs in the repository root
#   bash bench/run.sh --help             # the suites, one line each
#
# SUITE is bench/suites/SUITE.sh; its header says what it measures, what it assumes and what it
# writes. The GPU-machine suites (those marked "devrun") source bench/lib.sh, run the programs of
# the devrun layout (bench/README.md), give every step its own time limit, keep going when one
# fails and write their logs and JSON under $OUT (default out/gpu-run-SUITE).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)

# name | machine | what it measures (one line of --help)
suites=(
  "models|devrun, 1 GPU|models and benchmarks against PyG: tests, Cora accuracy (ours, PyG), gt-bench kernels and step vs pyg_baseline.py (~6 min)"
  "dkp|devrun, 1 GPU|dynamic kernel placement: Dkp tests, gt-bench dkp on synthetic and Cora/Cornell5/Twitch-DE batches (a few min)"
  "fullbatch|devrun, 1 GPU|full-batch regime: kept batch vs prepared each epoch, combine-first, PyG's steps, accuracy (~2.5 min)"
  "tasks|devrun, 1 GPU|node tasks: GPU tests, accuracy and ROC-AUC, dkp auto vs fixed, products, multi-label, PyG (~25 min; STEPS=...)"
  "dp|devrun, 2 GPUs|data-parallel training over NCCL: tests, all-reduce, accuracy on 1 and 2 GPUs, products epochs (~6 min)"
  "jobs|devrun, 2 GPUs|jobs of several processes (scripts/launch-local.sh): disagreeing keys, a killed rank, early stopping (~1 min)"
  "watch|devrun, 2 GPUs|peer watch: two processes started by hand, one killed or stopped; the other must name it"
  "accuracy|build/ or GT_TRAIN|mean test accuracy over 5 seeds of a config: accuracy CONFIG [--set key=value]..."
  "node-tasks|build/ or GT_TRAIN|node-task measurements on data/NAME.h5 (DEVICE=cpu|cuda): node-tasks dkp|acc|auc..."
  "serve|build/|gt-serve beside misbehaving clients, line protocol vs HTTP: serve [OUT_DIR] [LINE_SERVE LINE_LOADGEN]"
  "serve-recommend|build/|p50/p99 of a link model's top-K recommend (gt-loadgen --kind recommend): serve-recommend MODEL.h5 [DATA.h5] [OUT_DIR]"
)

usage() {
  echo "usage: bash bench/run.sh SUITE [ARGS...]   (bench/README.md; each suite's header in bench/suites/)"
  echo
  local s name machine what
  for s in "${suites[@]}"; do
    IFS='|' read -r name machine what <<< "$s"
    printf '  %-15s %-21s %s\n' "$name" "[$machine]" "$what"
  done
}

case ${1:-} in
  "" | -h | --help | help)
    usage
    [ $# -gt 0 ]; exit $?;;  # --help succeeds; no suite at all is a usage error
esac
suite=$1
shift
if [ ! -f "$root/bench/suites/$suite.sh" ]; then
  echo "bench/run.sh: unknown suite '$suite'" >&2
  usage >&2
  exit 2
fi
exec bash "$root/bench/suites/$suite.sh" "$@"
