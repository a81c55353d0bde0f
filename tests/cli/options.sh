#!/usr/bin/env bash
# Option parsing of the programs on CLI11 (examples/cli.h), run by ctest as
#   bash tests/cli/options.sh GT_TRAIN GT_PREDICT GT_SERVE GT_LOADGEN GT_BENCH
# For each: --help is generated (lists every option, exit 0, on stdout); an unknown option, an
# option given twice and a value out of range are one line on stderr naming the option, status 2.
# gt-bench: the same for each subcommand (`gt-bench SUBCOMMAND --help`), and the checks a
# subcommand makes after CLI11 has read its options are usage errors too.
set -u
if [ $# -ne 5 ]; then
  echo "usage: bash $0 GT_TRAIN GT_PREDICT GT_SERVE GT_LOADGEN GT_BENCH" >&2
  exit 2
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gt_options.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
die() {
  echo "FAIL: $*" >&2
  exit 1
}
# help PROGRAM OPTION...: --help exits 0 and lists each OPTION.
help() {
  local prog=$1
  shift
  "$prog" --help >"$WORK/out.txt" 2>"$WORK/err.txt" || die "$(basename "$prog") --help: status $?"
  [ -s "$WORK/err.txt" ] && die "$(basename "$prog") --help wrote to stderr: $(cat "$WORK/err.txt")"
  for o in "$@"; do grep -q -- "$o" "$WORK/out.txt" || die "$(basename "$prog") --help lacks $o"; done
}
# usage PROGRAM SUBSTRING ARGS...: status 2 and one line on stderr with SUBSTRING.
usage() {
  local prog=$1 want=$2
  shift 2
  "$prog" "$@" >/dev/null 2>"$WORK/err.txt"
  local rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err.txt")" -eq 1 ] && grep -qF -- "$want" "$WORK/err.txt" ||
    die "$(basename "$prog") $*: status $rc, expected 2 and one line with '$want': $(cat "$WORK/err.txt")"
}

help "$1" --set --resume --trace --print-config --print-graph --print-config-keys --version
usage "$1" "unknown option '--frob'" c.yaml --frob
usage "$1" "--resume may be given once" c.yaml --resume a.h5 --resume b.h5
usage "$1" "--resume needs a checkpoint file before the next option, got '--set'" c.yaml --resume --set a=b
usage "$1" "--trace: 1 required" c.yaml --trace
usage "$1" "unexpected argument 'b.yaml'" a.yaml b.yaml
usage "$1" "no config file given"
echo "ok: gt-train"

help "$2" --dataset --split --all --embeddings --device --fanouts --batch --threads --ids --version
usage "$2" "--split is given twice" m.h5 o.csv --split a --split b
usage "$2" "unknown option '--nodes'" m.h5 o.csv --nodes 1
usage "$2" "--batch needs a number of nodes >= 1, got '0'" m.h5 o.csv --batch 0
usage "$2" "--threads needs a number in [0, 4096], got '-1'" m.h5 o.csv --threads -1
usage "$2" "--fanouts needs positive integers" m.h5 o.csv --fanouts 0,1
usage "$2" "--ids needs a list of node ids like 0,5,7, got 'x'" m.h5 o.csv --ids x
echo "ok: gt-predict"

help "$3" --dataset --host --port --max-connections --request-timeout-s --write-timeout-s --max-queued-bytes \
  --max-request-bytes --max-request-ids --idle-timeout-s --send-buffer-bytes
usage "$3" "--max-connections needs a number in [1, 100000], got '0'" m.h5 --max-connections 0
usage "$3" "--write-timeout-s needs a number of seconds in (0, 3600], got 'inf'" m.h5 --write-timeout-s inf
usage "$3" "--max-queued-bytes needs a number in [65536, " m.h5 --max-queued-bytes 10
usage "$3" "--host is given twice" m.h5 --host a --host b
echo "ok: gt-serve"

help "$4" --port --clients --nodes --duration --warmup --kind "--k INT" --seed --json --misbehave --misbehaving-clients
usage "$4" "--misbehave needs none, slow-sender, non-reader or abandoner, got 'rude'" --port 1 --misbehave rude
usage "$4" "--nodes needs a number >= 1, got '1x'" --port 1 --nodes 1x
usage "$4" "--warmup needs a number of seconds in [0, 86400], got '-1'" --port 1 --warmup -1
usage "$4" "--k needs a number in [1, 1024], got '0'" --port 1 --k 0
echo "ok: gt-loadgen"

B=$5
# bench_help SUB OPTION...: `gt-bench SUB --help` exits 0 with SUB's own help, listing each OPTION.
bench_help() {
  local sub=$1
  shift
  "$B" "$sub" --help >"$WORK/out.txt" 2>"$WORK/err.txt" || die "gt-bench $sub --help: status $?"
  [ -s "$WORK/err.txt" ] && die "gt-bench $sub --help wrote to stderr: $(cat "$WORK/err.txt")"
  grep -q "^Usage: .*gt-bench $sub" "$WORK/out.txt" && ! grep -q "^usage: gt-bench" "$WORK/out.txt" ||
    die "gt-bench $sub --help is not its own: $(cat "$WORK/out.txt")"
  for o in "$@"; do grep -q -- "$o" "$WORK/out.txt" || die "gt-bench $sub --help lacks $o"; done
}
help "$B" pipeline kernels step dkp allreduce gather shard-gather layerwise "--sizes-kb 64,1024,16384,262144"
bench_help pipeline --fanouts --batch --batches --threads --device --prefetch --prefetch-mb --gpu-cache-mb \
  --gpu-sampling --json
bench_help kernels --workload --iters --align --row-alignment --json
bench_help step --workload --model --iters --tf32 --dkp --aggregation --no-align --row-alignment --json
bench_help dkp --workload --model --iters --warmup --scale --device --tf32 --dataset --fanouts --batch --json
bench_help allreduce --gpus --comm --sizes-kb --iters --json
bench_help gather --table-gb --row-bytes --types --batch-rows --cached --iters --json
bench_help shard-gather --gpus --table-gb --row-bytes --types --batch-rows --iters --json
bench_help layerwise --model-file --model --layers --hidden --device --batch --batched-nodes --batched-seconds \
  --table-dtype --chunk-nodes --device-table-mb --seed --json
usage "$B" "unknown option '--frob' (see gt-bench dkp --help)" dkp --frob 1
usage "$B" "unknown subcommand 'frob'" frob
usage "$B" "--batch needs a number in [1, 1099511627776], got '0'" pipeline d.h5 --batch 0
usage "$B" "--iters needs a number in [1, 1000000], got '2x'" step --iters 2x
usage "$B" "--iters is given twice" dkp --iters 1 --iters 2
usage "$B" "--comm needs nccl or host, got 'tcp'" allreduce --comm tcp
usage "$B" "--aggregation needs mean, sum or max, got 'min'" step --aggregation min
usage "$B" "--row-alignment needs 16, 32, 64 or 128, got '48'" kernels --align --row-alignment 48
usage "$B" "--scale needs a number in (0, 1], got '0'" dkp --scale 0
usage "$B" "--table-dtype needs float32, bfloat16 or float16, got 'int8'" layerwise d.h5 --table-dtype int8
usage "$B" "dataset is required" layerwise --batch 1
# Checked after parsing, still usage errors naming the option.
usage "$B" "--workload: products is listed twice" kernels --workload products --workload products
usage "$B" "--workload needs products, " dkp --workload frob
usage "$B" "--fanouts entries must be >= 1 or -1, got 0" pipeline d.h5 --fanouts 0,1
usage "$B" "--sizes-kb needs a comma-separated list of integers, got '1,x'" allreduce --sizes-kb 1,x
usage "$B" "--cached entries are percentages 0..100, got 101" gather --cached 101
usage "$B" "--row-bytes entries must be multiples of 4 from 4 to 1 MiB, got 6" shard-gather --row-bytes 6
echo "ok: gt-bench"
echo "options.sh: all checks passed"
