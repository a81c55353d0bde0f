#!/usr/bin/env bash
# The main job on a fresh machine: install the packages, build, generate the embedded default
# dataset (a seeded synthetic graph) and train the default config on it, on the GPU when there is
# one and on the CPU otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
mkdir -p data
[ -f data/synth-default.h5 ] || ./build/gt-data synth data/synth-default.h5
./build/gt-train configs/default.yaml "$@"
