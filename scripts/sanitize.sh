#!/usr/bin/env bash
# Sanitizer runs of the CPU build (GT_WITH_CUDA=OFF, g++):
#   1. AddressSanitizer + UndefinedBehaviorSanitizer: the four test executables, gt-data,
#      gt-train and gt-bench are built into build-asan/ (-O1 -g1, GT_SANITIZE=address) and the ctest suite runs
#      there (all but cli_consumer and cli_service, see below).
#   2. ThreadSanitizer: tsan_test (the six files of preprocess_test and framework_test that hold
#      the cases below) is built into build-tsan/ (GT_SANITIZE=thread) and its multithreaded cases
#      run: the sampler and the pipeline, the host collectives and the rendezvous, thread groups that fail to start a thread, and the
#      gather that meets SIGBUS on its worker threads. (Whole data-parallel training runs are left out: every
#      oneTBB hand-off in them is a suppressed report, and matching thousands of those made one
#      3-second test take over 10 minutes under TSan.)
#   bash scripts/sanitize.sh [asan|tsan]     (default: both)
# Any sanitizer report fails the run (UBSan does not recover; ASan, LSan and TSan exit nonzero).
# Suppressions, each explained in its file: tests/sanitizers/{lsan,ubsan,tsan}.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
case $what in all | asan | tsan) ;; *) echo "usage: bash scripts/sanitize.sh [asan|tsan]" >&2; exit 2 ;; esac
jobs=$(nproc)
# -g1: line tables only, all a sanitizer's stack trace prints (file:line, inlined frames); full
# debug information made the ASan build 40% slower (train_test.cc: 38 s against 27 s).
# Unity build (batches of 8 library and program sources; the tests compile one by one with a
# precompiled header): instrumented, the headers each source shares (oneTBB, yaml-cpp,
# nlohmann-json) cost more than its own code, and a batch compiles them once (the first 8 library
# sources: 25 CPU-seconds under ASan against 42 one by one).
common=(-DGT_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
        -DCMAKE_UNITY_BUILD=ON)
command -v ccache >/dev/null 2>&1 && common+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
supp=$PWD/tests/sanitizers

if [ "$what" != tsan ]; then
  start=$SECONDS
  CC=gcc CXX=g++ cmake -S . -B build-asan "${common[@]}" -DGT_SANITIZE=address >/dev/null
  # Only what the CPU test suite runs (not gt-serve, gt-loadgen): keeps CI short.
  cmake --build build-asan -j"$jobs" --target framework_test preprocess_test kernels_test models_test \
    layerwise_test gt-data gt-train gt-bench gt-predict
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1
  export LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0
  export UBSAN_OPTIONS=suppressions=$supp/ubsan.supp:print_stacktrace=1:halt_on_error=1
  # Left to the normal suite: cli_consumer builds a separate project against the installed
  # package (which cannot link an ASan library); cli_service, cli_serve_limits, cli_options and
  # cli_recommend need the service programs (and cli_recommend test_make_link_model); symbols reads libgraphtensor.so, which the tests and programs do
  # not link (they link graphtensor_internal) and which is not built here.
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -E '^(cli_consumer|cli_service|cli_serve_limits|cli_options|cli_recommend|symbols)$'

  echo "sanitize.sh: ASan + UBSan suite passed in $((SECONDS - start)) s"
fi

if [ "$what" != asan ]; then
  start=$SECONDS
  CC=gcc CXX=g++ cmake -S . -B build-tsan "${common[@]}" -DGT_SANITIZE=thread -DGT_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build build-tsan -j"$jobs" --target tsan_test
  # history_size=7 (the largest): with the default, the older access of a report sometimes comes
  # back as "[failed to restore the stack]", so its oneTBB frames cannot match the suppression.
  export TSAN_OPTIONS="suppressions=$supp/tsan.supp halt_on_error=1 second_deadlock_stack=1 history_size=7"
  build-tsan/tsan_test --gtest_filter='Sampler*:Pipeline*:FeatureTableHostile*'
  build-tsan/tsan_test --gtest_filter='HostGroup*:Rendezvous*:ThreadGroup*'
  echo "sanitize.sh: ThreadSanitizer run passed in $((SECONDS - start)) s"
fi
