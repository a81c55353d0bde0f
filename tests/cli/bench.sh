#!/usr/bin/env bash
# gt-bench's option checks and small CPU runs, run by ctest as
#   bash tests/cli/bench.sh GT_DATA GT_BENCH
# Every bad option must give a nonzero exit status and one line on stderr that names the option,
# before anything is timed (no table); a failing run leaves an existing --json file byte for byte;
# pipeline, allreduce and dkp on a small synthetic dataset give the rows and JSON that
# docs/reliability.md describes. GPUs are hidden (CUDA_VISIBLE_DEVICES=): the CPU paths are
# checked on any machine, and kernels/step must refuse bad options before they look for a GPU.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: bash $0 GT_DATA GT_BENCH" >&2
  exit 2
fi
GT_DATA=$1
GT_BENCH=$2
export CUDA_VISIBLE_DEVICES=

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gt_bench_cli.XXXXXX")
FAILED=0

finish() {
  local status=$?
  rm -rf "$WORK"
  if [ $FAILED -ne 0 ] || [ $status -ne 0 ]; then
    echo "bench.sh: some checks failed" >&2
    exit 1
  fi
  echo "bench.sh: all checks passed"
}
trap finish EXIT

fail() {
  echo "FAIL: $*" >&2
  FAILED=1
}

# expect_error NAME SUBSTRING -- ARGS...: `gt-bench ARGS` exits nonzero, stderr is one line
# containing SUBSTRING, and stdout has no table row (nothing was timed). The cases keep the work
# small (and a time limit) in case a regression runs them instead of refusing.
expect_error() {
  local name=$1 substring=$2 rc=0
  shift 3
  timeout -k 5 60 "$GT_BENCH" "$@" >"$WORK/stdout.txt" 2>"$WORK/stderr.txt" || rc=$?
  if [ $rc -eq 0 ]; then
    fail "$name: exit status 0, expected an error"
  elif [ "$(wc -l <"$WORK/stderr.txt")" -ne 1 ] || ! grep -qF -- "$substring" "$WORK/stderr.txt"; then
    fail "$name: stderr is not one line naming '$substring': $(cat "$WORK/stderr.txt")"
  elif grep -q '^| ' "$WORK/stdout.txt"; then
    fail "$name: rows were timed before the error: $(cat "$WORK/stdout.txt")"
  else
    echo "ok: $name"
  fi
}

# expect_kept NAME FILE -- ARGS...: `gt-bench ARGS` fails and FILE is as it was before.
expect_kept() {
  local name=$1 file=$2 rc=0
  shift 3
  cp "$file" "$WORK/kept.orig"
  timeout -k 5 60 "$GT_BENCH" "$@" >"$WORK/stdout.txt" 2>"$WORK/stderr.txt" || rc=$?
  if [ $rc -eq 0 ]; then
    fail "$name: exit status 0, expected an error"
  elif ! cmp -s "$file" "$WORK/kept.orig"; then
    fail "$name: the failed run changed $file (now $(wc -c <"$file") bytes)"
  else
    echo "ok: $name"
  fi
}

DATA=$WORK/small.h5
"$GT_DATA" synth "$DATA" --nodes 3000 >/dev/null 2>&1 || { fail "gt-data synth failed"; exit 1; }
TRAIN=$("$GT_DATA" info "$DATA" | sed -n 's/^splits:.* train \([0-9]*\).*/\1/p')
[ -n "$TRAIN" ] || { fail "no train split size in gt-data info"; exit 1; }
mkdir "$WORK/dir"
P=(pipeline "$DATA" --batches 2)
D=(dkp --iters 1 --warmup 2)
S=(--scale 0.002 --workload products)
A=(allreduce --comm host --iters 1)

# --- bad options ---
expect_error "pipeline --threads above the cores" "--threads 100000" -- "${P[@]}" --threads 100000
expect_error "pipeline --threads listed twice" "--threads: 1 is listed twice" -- "${P[@]}" --threads 1,1
expect_error "pipeline --json a directory" "--json" -- "${P[@]}" --json "$WORK/dir"
for opt in --batch --batches --prefetch --prefetch-mb --gpu-cache-mb; do
  expect_error "pipeline $opt with a list" "$opt" -- "${P[@]}" --threads 1 "$opt" 1,2
done
expect_error "pipeline --gpu-sampling without a GPU" "GPU machine" -- "${P[@]}" --gpu-sampling
expect_error "pipeline --host-gather-shares without --gpu-sampling" "needs --gpu-sampling" -- "${P[@]}" --host-gather-shares 0.5
for bad in 2 -1.5 x 0.5x "0.5,,1" "0.5," ",0.5" nan; do
  expect_error "pipeline --host-gather-shares $bad" "--host-gather-shares" -- "${P[@]}" --gpu-sampling --host-gather-shares "$bad"
done
expect_error "pipeline --host-gather-shares listed twice" "is listed twice" -- "${P[@]}" --gpu-sampling --host-gather-shares 0.5,0.5
expect_error "pipeline --host-gather-shares without a GPU" "GPU machine" -- "${P[@]}" --gpu-sampling --host-gather-shares 0,-1
expect_error "shard-gather without 2 GPUs" "2 GPUs" -- shard-gather --table-gb 1 --iters 1
expect_error "allreduce --gpus 1" "--gpus" -- "${A[@]}" --gpus 1 --sizes-kb 1
expect_error "allreduce duplicate sizes" "--sizes-kb: 64 is listed twice" -- "${A[@]}" --sizes-kb 64,64
expect_error "allreduce huge size" "--sizes-kb" -- "${A[@]}" --sizes-kb 99999999999
# 1025 buffers of 4 GiB: refused for the machine's memory. The address-space limit only matters
# to a regression, which would otherwise start allocating 4 TiB (not under AddressSanitizer
# (scripts/sanitize.sh), whose shadow memory alone needs terabytes of address space).
linked=$(ldd "$GT_BENCH" 2>/dev/null || true)
( [[ $linked == *libasan* ]] || ulimit -v 4000000
  expect_error "allreduce size beyond memory" "--sizes-kb 4194304" -- "${A[@]}" --gpus 1024 --sizes-kb 4194304
  exit $FAILED ) || FAILED=1
expect_error "allreduce --json a directory" "--json" -- "${A[@]}" --sizes-kb 1 --json "$WORK/dir"
expect_error "kernels --row-alignment without --align" "--row-alignment" -- kernels --row-alignment 64
expect_error "kernels duplicate workload" "--workload" -- kernels --workload products,products
expect_error "kernels --json a directory" "--json" -- kernels --json "$WORK/dir"
expect_error "step --no-align --row-alignment" "--row-alignment" -- step --no-align --row-alignment 64
expect_error "step empty --model" "--model" -- step --model ,
expect_error "step duplicate --model" "--model" -- step --model gcn,gcn
expect_error "step --aggregation min" "mean, sum or max" -- step --aggregation min
expect_error "step --aggregation max --dkp auto" "never placed" -- step --aggregation max --dkp auto
expect_error "dkp empty --model" "--model" -- "${D[@]}" "${S[@]}" --model ,
expect_error "dkp duplicate --model" "--model" -- "${D[@]}" "${S[@]}" --model gcn,gcn
expect_error "dkp empty --workload" "--workload" -- "${D[@]}" --scale 0.002 --workload ,
expect_error "dkp duplicate --workload" "--workload" -- "${D[@]}" "${S[@]}" --workload products
expect_error "dkp --warmup 1" "--warmup" -- "${D[@]}" "${S[@]}" --warmup 1
expect_error "dkp --scale 2" "--scale needs a number in (0, 1]" -- "${D[@]}" --workload products --scale 2
expect_error "dkp --dataset with --workload" "--workload" -- "${D[@]}" --dataset "$DATA" --workload products
expect_error "dkp --dataset with --scale" "--scale" -- "${D[@]}" --dataset "$DATA" --scale 0.5
expect_error "dkp --json a directory" "--json" -- "${D[@]}" "${S[@]}" --json "$WORK/dir"

# --- a failing run keeps the previous results ---
printf '{"bench": "earlier results"}\n' >"$WORK/prev.json"
expect_kept "dkp failing run keeps --json" "$WORK/prev.json" -- "${D[@]}" --dataset "$WORK/missing.h5" --json "$WORK/prev.json"
expect_kept "pipeline failing run keeps --json" "$WORK/prev.json" -- pipeline "$WORK/missing.h5" --json "$WORK/prev.json"
expect_kept "kernels without a GPU keeps --json" "$WORK/prev.json" -- kernels --json "$WORK/prev.json"

"$GT_BENCH" --help >"$WORK/help.txt"
grep -qF -- "--sizes-kb 64,1024,16384,262144" "$WORK/help.txt" || fail "--help: allreduce's default sizes"
grep -qF "also takes gin and gat" "$WORK/help.txt" || fail "--help: step's --model choices"

# --- small runs ---
check_json() {  # check_json NAME FILE PYTHON: PYTHON gets `rows`, the file's JSON lines
  if python3 -c "import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
$3" "$2" 2>"$WORK/py.txt"; then
    echo "ok: $1"
  else
    fail "$1: $(tail -1 "$WORK/py.txt"); the file: $(cat "$2")"
  fi
}

if "$GT_BENCH" pipeline "$DATA" --threads 1 --batch 256 --batches 3 --json "$WORK/p.json" >"$WORK/p.txt" 2>&1; then
  grep -qF "3 batches of 256 seeds" "$WORK/p.txt" || fail "pipeline: header: $(cat "$WORK/p.txt")"
  grep -qE '^\| 1 \| .* \| n/a \|' "$WORK/p.txt" || fail "pipeline: H2D column not n/a on the CPU: $(cat "$WORK/p.txt")"
  check_json "pipeline JSON" "$WORK/p.json" "
assert len(rows) == 1, rows
r = rows[0]
assert r['bench'] == 'pipeline' and r['threads'] == 1 and r['batches'] == 3 and r['batch_size'] == 256
assert r['h2d_bytes'] is None, 'h2d_bytes on the CPU'
assert r['seeds'] == 768 and r['fanouts'] == '15,10,5', r"
else
  fail "pipeline run: $(cat "$WORK/p.txt")"
fi

# A batch larger than the train split: one batch of the whole split, said and recorded as such.
if "$GT_BENCH" pipeline "$DATA" --threads 1 --batch 100000 --batches 5 --json "$WORK/p2.json" >"$WORK/p2.txt" 2>&1; then
  grep -qF "1 batch of $TRAIN seeds (--batch 100000, --batches 5 asked; the train split has $TRAIN nodes)" \
    "$WORK/p2.txt" || fail "pipeline: header of an oversized batch: $(head -3 "$WORK/p2.txt")"
  check_json "pipeline JSON of an oversized batch" "$WORK/p2.json" "
r = rows[0]
assert r['batches'] == 1 and r['batch_size'] == 100000 and r['seeds'] == $TRAIN, r"
else
  fail "pipeline run with --batch 100000: $(cat "$WORK/p2.txt")"
fi

if "$GT_BENCH" allreduce --comm host --gpus 3 --sizes-kb 1,4 --iters 2 --json "$WORK/a.json" >"$WORK/a.txt" 2>&1; then
  check_json "allreduce JSON" "$WORK/a.json" "
assert [r['size_kb'] for r in rows] == [1, 4], rows
assert all(r['ranks'] == 3 and r['backend'] == 'host' and r['seconds'] > 0 for r in rows), rows
assert all(r['peer_copy_gbs'] is None for r in rows), 'peer_copy_gbs without a measurement'"
else
  fail "allreduce run: $(cat "$WORK/a.txt")"
fi

if "$GT_BENCH" dkp --scale 0.002 --warmup 2 --iters 1 --model gcn,ngcf --workload products --json "$WORK/d.json" \
  >"$WORK/d.txt" 2>&1; then
  grep -qE '^\| products \| ngcf \| .* \| fixed \|' "$WORK/d.txt" || fail "dkp: ngcf's orders are not 'fixed': $(cat "$WORK/d.txt")"
  check_json "dkp JSON" "$WORK/d.json" "
assert [r['model'] for r in rows] == ['gcn', 'ngcf'], rows
assert rows[1]['auto_orders'] == 'fixed', rows[1]
assert all(r['scale'] == 0.002 and r['rounds'] >= 1 for r in rows), rows"
else
  fail "dkp run: $(cat "$WORK/d.txt")"
fi

# A dataset's batch is not scaled: no scale printed or recorded.
if "$GT_BENCH" dkp --dataset "$DATA" --fanouts 5,5 --batch 128 --warmup 2 --iters 1 --json "$WORK/dd.json" \
  >"$WORK/dd.txt" 2>&1; then
  ! grep -q "scale" "$WORK/dd.txt" || fail "dkp --dataset: a scale in the header: $(head -1 "$WORK/dd.txt")"
  check_json "dkp --dataset JSON" "$WORK/dd.json" "
assert len(rows) == 1 and 'scale' not in rows[0] and rows[0]['rounds'] >= 1, rows"
else
  fail "dkp --dataset run: $(cat "$WORK/dd.txt")"
fi

# Layer-wise against per-batch inference: the same predictions; a stop by --batched-nodes is said.
expect_error "layerwise --table-dtype int8" "--table-dtype" -- layerwise "$DATA" --table-dtype int8
expect_error "layerwise --model-file with --model" "exclude each other" -- layerwise "$DATA" --model-file x --model gcn
if "$GT_BENCH" layerwise "$DATA" --hidden 16 --batch 256 --batched-nodes 600 --chunk-nodes 700 --json "$WORK/lw.json" \
  >"$WORK/lw.txt" 2>&1; then
  grep -q "per-batch ran over 600 of 3000 nodes" "$WORK/lw.txt" || fail "layerwise: no extrapolation line: $(cat "$WORK/lw.txt")"
  check_json "layerwise JSON" "$WORK/lw.json" "
r = rows[0]
assert len(rows) == 1 and r['nodes'] == 3000 and r['batched_nodes'] == 600 and r['batched_extrapolated'] == 'yes', r
assert r['prediction_agreement'] == 1 and r['max_abs_diff'] < 1e-4 and r['chunks'] == 3 * 5, r"
else
  fail "layerwise run: $(cat "$WORK/lw.txt")"
fi

leftover=$(find "$WORK" -name '*.tmp.*')
[ -z "$leftover" ] || fail "temporary files left behind: $leftover"
