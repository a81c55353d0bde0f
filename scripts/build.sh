#!/usr/bin/env bash
# Configures and builds into build/ (Release; the CUDA backend is compiled when nvcc is found).
# Extra arguments go to cmake's configure step, e.g. -DGT_WITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
