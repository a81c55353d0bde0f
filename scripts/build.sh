#!/usr/bin/env bash
# Configures and builds into build/ (Release; the CUDA backend is compiled when nvcc is found).
# Extra arguments go to cmake's configure step, e.g. -DGT_WITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
# A unity build: the library's and programs' C++ sources compile in batches of 8, so the headers
# they share (oneTBB, yaml-cpp, nlohmann-json) are compiled once a batch (the .cu files and the
# tests compile one by one). -DCMAKE_UNITY_BUILD=OFF for a build edited one source at a time.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON "$@"
cmake --build build -j"$(nproc)"
