#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, into build-fuzz/) and runs each
# for SECONDS (default 60), starting from the seeds in tests/fuzz/corpus/<target>/.
#   bash scripts/fuzz.sh [SECONDS]
# Prints executions and crashes per target; exits 1 when any target crashed. A crashing input is
# saved as build-fuzz/crashes/<target>/crash-*: fix the library, then add the input to the
# target's corpus folder as a regression seed. New inputs found while fuzzing go to
# build-fuzz/corpus/<target>/ (kept between runs, never committed).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
case $secs in '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$secs'" >&2; exit 2 ;; esac

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz.sh: clang++ not found; install it with: apt-get install clang libclang-rt-14-dev" >&2
  exit 1
fi
rt_dir=$(clang++ -print-resource-dir)/lib/linux
if ! ls "$rt_dir"/libclang_rt.fuzzer*-x86_64.a >/dev/null 2>&1; then
  echo "fuzz.sh: clang's libFuzzer runtime is missing from $rt_dir; install it with:" \
       "apt-get install libclang-rt-$(clang++ -dumpversion | cut -d. -f1)-dev" >&2
  exit 1
fi

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# RelWithDebInfo with line tables only (-g1): what a crash's stack trace needs, built faster; a
# unity build, as scripts/sanitize.sh's (the instrumented headers cost more than the sources).
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DGT_FUZZ=ON \
  -DGT_WITH_CUDA=OFF -DBUILD_TESTING=OFF -DGT_BUILD_EXAMPLES=OFF -DGT_SHARED=OFF -DCMAKE_UNITY_BUILD=ON "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j"$(nproc)"

# Scratch files of the targets: on tmpfs when there is one, removed at the end.
GT_FUZZ_SCRATCH=$(mktemp -d /dev/shm/gt_fuzz.XXXXXX 2>/dev/null || mktemp -d)
export GT_FUZZ_SCRATCH
trap 'rm -rf "$GT_FUZZ_SCRATCH"' EXIT
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0
# fuzz_target TARGET: fuzzes one target for SECONDS, prints what it found, and writes its summary
# line to build-fuzz/TARGET.summary and, when it failed, build-fuzz/TARGET.failed.
fuzz_target() {
  local target=$1
  corpus=build-fuzz/corpus/$target
  crashes=build-fuzz/crashes/$target
  log=build-fuzz/$target.log
  mkdir -p "$corpus" "$crashes"
  echo "== $target: ${secs}s"
  rc=0
  # -timeout: one input taking longer than 10 s is a finding (a hang); -rss_limit_mb: so is a
  # file whose few bytes make the library allocate gigabytes.
  opts=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
  asan=${ASAN_OPTIONS:-}
  if [ $target = fuzz_hdf5 ]; then
    # HDF5 itself mallocs object-header sizes read from the file (up to a terabyte) while it
    # opens a damaged file, and handles a failed malloc as an error. Let such a malloc fail as
    # it does without ASan instead of reporting it; our own allocations still abort (operator
    # new cannot return null), and touching more than 2 GiB still trips -rss_limit_mb.
    opts+=(-malloc_limit_mb=1073741824)
    asan=allocator_may_return_null=1${asan:+:$asan}
    # HDF5 1.10.8 also over-reads its own buffers on some damaged files (docs/reliability.md).
    # Fork mode keeps fuzzing past such crashes; each one is then classified below.
    opts+=(-fork=1 -ignore_crashes=1 -ignore_ooms=0 -ignore_timeouts=0)
  fi
  ASAN_OPTIONS=$asan "build-fuzz/$target" "${opts[@]}" -artifact_prefix="$crashes/" \
    "$corpus" "tests/fuzz/corpus/$target" >"$log" 2>&1 || rc=$?
  execs=$(awk '/stat::number_of_executed_units/ {n = $NF} /^#[0-9]+: cov:/ {n = substr($1, 2) + 0} END {print n}' "$log")
  hdf5_bugs=0 unrepro=0
  if [ $target = fuzz_hdf5 ]; then
    # A crash whose innermost frame (below the sanitizer runtime) lies in libhdf5 is HDF5's
    # own bug: moved to hdf5-internal/ and counted apart. Anything else is ours.
    mkdir -p "$crashes/hdf5-internal"
    # An out-of-memory input is replayed with a malloc limit, so that the one huge allocation is
    # reported with its stack (HDF5 also mallocs sizes it reads from a damaged file).
    # A timeout is replayed with the same limit: libFuzzer prints where it was stuck.
    for f in "$crashes"/crash-* "$crashes"/leak-* "$crashes"/oom-* "$crashes"/timeout-*; do
      [ -f "$f" ] || continue
      case $f in
        */oom-*) replay=(-rss_limit_mb=8192 -malloc_limit_mb=1024) ;;
        */timeout-*) replay=(-timeout=10 -malloc_limit_mb=1073741824) ;;
        *) replay=(-malloc_limit_mb=1073741824) ;;
      esac
      frame=$(ASAN_OPTIONS=$asan "build-fuzz/$target" "${replay[@]}" "$f" 2>&1 |
              grep -E '^ +#[0-9]+ ' | grep -vE '__interceptor|__asan|__sanitizer|fuzzer::|in (malloc|calloc|realloc|free)|operator (new|delete)|libc\.so|sysdeps/' |
              head -n 1 || true)
      case $frame in
        *libhdf5*) mv "$f" "$crashes/hdf5-internal/"; hdf5_bugs=$((hdf5_bugs + 1)) ;;
        # No stack: the input does not crash in a fresh process. Our readers keep no state between
        # files; HDF5 1.10 keeps caches and free lists, and a damaged file earlier in the same job
        # can leave them corrupt (seen: the same memcpy under H5Aexists as the hdf5-internal ones).
        # Kept apart and named, not counted as ours.
        "") mkdir -p "$crashes/unreproduced"; mv "$f" "$crashes/unreproduced/"; unrepro=$((unrepro + 1)) ;;
      esac
    done
    [ $hdf5_bugs -eq 0 ] || echo "   $hdf5_bugs crash(es) inside HDF5 itself: $crashes/hdf5-internal/"
    [ $unrepro -eq 0 ] || echo "   $unrepro crash(es) that do not reproduce in a fresh process: $crashes/unreproduced/"
    # Fork mode ends with "INFO: exiting: N", N the exit code of the last job that failed (1 for
    # a crash, 70 a timeout, 71 an out-of-memory input: with -ignore_crashes all are fuzzed past).
    # Every such job wrote its input to $crashes, classified above; what is left there is counted
    # below, so the exit code itself says nothing more.
    [ $rc -eq 0 ] || ! grep -q "^INFO: exiting: $rc " "$log" || rc=0
  fi
  ncrash=$(find "$crashes" -maxdepth 1 -type f | wc -l)
  if [ $rc -ne 0 ] || [ "$ncrash" -ne 0 ]; then
    touch "build-fuzz/$target.failed"
    grep -E "^==[0-9]+==ERROR|runtime error|SUMMARY|deadly signal|Test unit written" "$log" | head -n 8 || true
    echo "   (full log: $log)"
  fi
  printf '%-12s %10s executions  %d crashes  (exit %d)%s%s\n' "$target" "${execs:-?}" "$ncrash" "$rc" \
    "$([ $hdf5_bugs -eq 0 ] || echo "  + $hdf5_bugs inside HDF5 1.10 itself, not counted")" \
    "$([ $unrepro -eq 0 ] || echo "  + $unrepro not reproducible alone, not counted")" >"build-fuzz/$target.summary"
}

# The targets run side by side, as many at a time as there are cores (each libFuzzer process uses
# one; fuzz_hdf5's fork-mode parent mostly waits): each still gets SECONDS of a core to itself.
targets=(fuzz_csv fuzz_hdf5 fuzz_config)
for target in "${targets[@]}"; do rm -f "build-fuzz/$target.summary" "build-fuzz/$target.failed" "build-fuzz/$target.report"; done
for target in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
  fuzz_target "$target" >"build-fuzz/$target.report" 2>&1 &
done
wait
failed=0
for target in "${targets[@]}"; do
  cat "build-fuzz/$target.report"
  [ -f "build-fuzz/$target.summary" ] && [ ! -f "build-fuzz/$target.failed" ] || failed=1
done
echo "== fuzz summary (${secs}s per target)"
for target in "${targets[@]}"; do
  cat "build-fuzz/$target.summary" 2>/dev/null || echo "$target: the fuzzing job itself failed (build-fuzz/$target.report)"
done
exit $failed
