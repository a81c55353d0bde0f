#!/usr/bin/env bash
# Installs the packages, builds, and runs every test suite (GPU cases skip themselves without
# a GPU; tests that read ../shared/data skip when it is absent).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
