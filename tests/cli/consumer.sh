#!/usr/bin/env bash
# Packaging check, run by ctest as
#   bash tests/cli/consumer.sh BUILD_DIR SOURCE_DIR CMAKE
# Installs BUILD_DIR into a temporary prefix, checks the installed headers (the public set of
# include/graphtensor only, each compiling on its own, none including a private dependency),
# configures and builds examples/consumer against the prefix with find_package(graphtensor), and
# runs it (it prints OK). Then again with the CUDA Toolkit and oneTBB hidden from the consumer
# (CMAKE_DISABLE_FIND_PACKAGE_*, no nvcc on PATH, CUDAToolkit_ROOT=/nonexistent): a shared package
# must configure and build without them, no compile or link line may name them, and the program
# runs on the CPU (CUDA_VISIBLE_DEVICES empty).
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: bash $0 BUILD_DIR SOURCE_DIR CMAKE" >&2
  exit 2
fi
BUILD=$1
SRC=$2
CMAKE=$3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gt_consumer.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# README.md's "Use as a library" shows the consumer's run() verbatim: the lines between the
# readme markers of examples/consumer/main.cc appear in it as one block.
sed -n '/^\/\/ --- readme begin ---$/,/^\/\/ --- readme end ---$/p' "$SRC/examples/consumer/main.cc" | sed '1d;$d' \
  >"$WORK/excerpt.txt"
[ -s "$WORK/excerpt.txt" ] || { echo "FAIL: no readme markers in examples/consumer/main.cc" >&2; exit 1; }
python3 - "$SRC/README.md" "$WORK/excerpt.txt" <<'PY' || { echo "FAIL: README.md does not show examples/consumer/main.cc's run() verbatim" >&2; exit 1; }
import sys
readme, excerpt = (open(p).read() for p in sys.argv[1:])
sys.exit(0 if "```cpp\n" + excerpt + "```\n" in readme else 1)
PY
"$CMAKE" --install "$BUILD" --prefix "$WORK/prefix" >"$WORK/install.log" ||
  { cat "$WORK/install.log" >&2; echo "FAIL: cmake --install" >&2; exit 1; }
# The consumer uses the compiler the library was built with.
CXX_COMPILER=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
# Every installed header compiles on its own, as <graphtensor/...> (nothing internal or CUDA-only
# is installed), and is a public one: in SOURCE_DIR/include/graphtensor, or the generated version.h.
INC="$WORK/prefix/include"
bad=0
while IFS= read -r h; do
  rel=${h#"$INC"/}
  if [ ! -f "$SRC/include/$rel" ] && [ "$rel" != graphtensor/core/version.h ]; then
    echo "FAIL: installed header $rel is not a public header (include/graphtensor)" >&2; bad=1
  fi
  printf '#include <%s>\n' "$rel" > "$WORK/one_header.cc"
  "${CXX_COMPILER:-c++}" -std=c++20 -fsyntax-only -I"$INC" "$WORK/one_header.cc" 2>"$WORK/header.log" ||
    { cat "$WORK/header.log" >&2; echo "FAIL: installed header $rel does not compile on its own" >&2; bad=1; }
done < <(find "$INC" -name '*.h' | sort)
[ -f "$INC/graphtensor/graphtensor.h" ] || { echo "FAIL: no umbrella header graphtensor/graphtensor.h" >&2; bad=1; }
grep -q '^#define GRAPHTENSOR_VERSION_STRING "[0-9]*\.[0-9]*\.[0-9]*"' "$INC/graphtensor/core/version.h" ||
  { echo "FAIL: graphtensor/core/version.h has no GRAPHTENSOR_VERSION_STRING" >&2; bad=1; }
[ $bad -eq 0 ] || exit 1
# Compiling is not enough where the machine happens to have a private dependency's headers
# (yaml-cpp, HDF5, oneTBB are all here): no installed header may include one, or call itself
# internal.
if grep -ln -E '#include <(yaml-cpp|hdf5|H5|tbb|oneapi|cuda|cublas|nccl)' -r "$INC" >"$WORK/private.txt" ||
   grep -ln 'not installed' -r "$INC" >>"$WORK/private.txt"; then
  cat "$WORK/private.txt" >&2
  echo "FAIL: installed headers above include a private dependency or say they are internal" >&2
  exit 1
fi
LAUNCHER=$(sed -n 's/^CMAKE_CXX_COMPILER_LAUNCHER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
args=(-S "$SRC/examples/consumer" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$WORK/prefix")
[ -z "$CXX_COMPILER" ] || args+=(-DCMAKE_CXX_COMPILER="$CXX_COMPILER")
[ -z "$LAUNCHER" ] || args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$LAUNCHER")
"$CMAKE" "${args[@]}" -B "$WORK/build" >"$WORK/configure.log" 2>&1 ||
  { cat "$WORK/configure.log" >&2; echo "FAIL: configuring the consumer" >&2; exit 1; }
"$CMAKE" --build "$WORK/build" >"$WORK/build.log" 2>&1 ||
  { cat "$WORK/build.log" >&2; echo "FAIL: building the consumer" >&2; exit 1; }
# It must run from the installed library, not the build tree's.
# (ldd's output is read whole first: `ldd | grep -q` under pipefail fails whenever grep exits at its
# first match before ldd has written everything, and ldd dies of SIGPIPE.)
libs=$(ldd "$WORK/build/gt-consumer")
grep -q "$WORK/prefix" <<<"$libs" ||
  { echo "$libs" >&2; echo "FAIL: the consumer does not link the installed library" >&2; exit 1; }
out=$("$WORK/build/gt-consumer")
echo "$out"
[ "$(echo "$out" | tail -1)" = OK ] || { echo "FAIL: the consumer did not print OK" >&2; exit 1; }
# The installed programs start as they are, without LD_LIBRARY_PATH (they link the library's
# static in-tree variant, graphtensor_internal; only the consumer above uses libgraphtensor.so).
for program in gt-data gt-train gt-predict; do
  if [ -x "$WORK/prefix/bin/$program" ]; then
    env -u LD_LIBRARY_PATH "$WORK/prefix/bin/$program" --help >"$WORK/help.txt" 2>&1 ||
      { cat "$WORK/help.txt" >&2; echo "FAIL: installed $program does not start" >&2; exit 1; }
  fi
done

# The consumer again, with the CUDA Toolkit and oneTBB hidden: private dependencies of a shared
# package are not the consumer's (a static package needs them, graphtensorConfig.cmake says so).
shared=$(sed -n 's/^set(GRAPHTENSOR_SHARED \(.*\))$/\1/p' "$WORK/prefix"/lib*/cmake/graphtensor/graphtensorConfig.cmake)
if [ "$shared" = ON ]; then
  hidden_path=""
  IFS=: read -r -a dirs <<<"$PATH"
  for d in "${dirs[@]}"; do
    [ -n "$d" ] && [ ! -x "$d/nvcc" ] && [[ $d != *cuda* ]] && hidden_path+="${hidden_path:+:}$d"
  done
  hidden=(env -u CUDACXX -u CUDA_HOME -u CUDA_PATH -u CUDA_ROOT -u TBB_DIR PATH="$hidden_path"
          CUDAToolkit_ROOT=/nonexistent)
  "${hidden[@]}" "$CMAKE" "${args[@]}" -B "$WORK/build-hidden" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE \
      -DCMAKE_DISABLE_FIND_PACKAGE_TBB=TRUE -DCMAKE_DISABLE_FIND_PACKAGE_CUDA=TRUE \
      >"$WORK/configure-hidden.log" 2>&1 ||
    { cat "$WORK/configure-hidden.log" >&2; echo "FAIL: configuring the consumer with CUDA and oneTBB hidden" >&2; exit 1; }
  "${hidden[@]}" "$CMAKE" --build "$WORK/build-hidden" --verbose >"$WORK/build-hidden.log" 2>&1 ||
    { cat "$WORK/build-hidden.log" >&2; echo "FAIL: building the consumer with CUDA and oneTBB hidden" >&2; exit 1; }
  # The compile and link lines (those naming main.cc or gt-consumer) name no CUDA or oneTBB path,
  # library or definition.
  if grep -E 'main\.cc|-o gt-consumer' "$WORK/build-hidden.log" | grep -i -E 'cuda|tbb'; then
    echo "FAIL: the consumer's compile or link lines above name CUDA or oneTBB" >&2; exit 1
  fi
  grep -q -E 'main\.cc' "$WORK/build-hidden.log" ||
    { cat "$WORK/build-hidden.log" >&2; echo "FAIL: no compile line in the verbose build log" >&2; exit 1; }
  out=$(CUDA_VISIBLE_DEVICES= "$WORK/build-hidden/gt-consumer")
  [ "$(echo "$out" | tail -1)" = OK ] ||
    { echo "$out" >&2; echo "FAIL: the consumer built with CUDA hidden did not print OK on the CPU" >&2; exit 1; }
  echo "consumer.sh: configured, built and ran on the CPU with the CUDA Toolkit and oneTBB hidden"
fi
echo "consumer.sh: installed package works"
