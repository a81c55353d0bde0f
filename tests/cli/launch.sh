#!/usr/bin/env bash
# scripts/launch-local.sh, run by ctest as
#   bash tests/cli/launch.sh SOURCE_DIR
# Each rank sees its place in the job; the job's status is the first failure's; when one rank
# fails the others are stopped, those that ignore SIGTERM too (after the 10 s grace), so no
# process of the job outlives it; bad arguments are refused. Stand-in commands (bash) play the
# ranks: a job of real gt-train processes needs GPUs (NCCL).
set -u

if [ $# -ne 1 ]; then
  echo "usage: bash $0 SOURCE_DIR" >&2
  exit 2
fi
LAUNCH="$1/scripts/launch-local.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gt_launch.XXXXXX") || exit 1
FAILED=0
finish() {
  rm -rf "$WORK"
  if [ $FAILED -ne 0 ]; then
    echo "launch.sh: some checks failed" >&2
    exit 1
  fi
  echo "launch.sh: all checks passed"
}
trap finish EXIT
fail() {
  echo "FAIL: $*" >&2
  FAILED=1
}

# Every rank runs with its variables, its output prefixed.
out=$(bash "$LAUNCH" 3 bash -c 'echo "place $GT_RANK of $GT_WORLD_SIZE, local $GT_LOCAL_RANK"' 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "a job whose ranks succeed exited $rc"
for r in 0 1 2; do
  grep -qx "\[rank $r\] place $r of 3, local $r" <<< "$out" || fail "rank $r's line is missing: $out"
done

# One rank fails: the job's status is its status, the others are stopped at once, and none
# lingers. The marker is unique to this run so that pgrep finds only our processes.
marker="gt_launch_$$_a"
start=$SECONDS
bash "$LAUNCH" 3 bash -c "[ \$GT_RANK = 1 ] && exit 3; exec -a $marker sleep 60" > "$WORK/a.log" 2>&1
rc=$?
[ $rc -eq 3 ] || fail "a job with a rank that exits 3 exited $rc"
[ $((SECONDS - start)) -lt 8 ] || fail "the surviving ranks were not stopped promptly ($((SECONDS - start)) s)"
grep -q "rank 1 exited with status 3; stopping the others" "$WORK/a.log" || fail "no message naming the failed rank: $(cat "$WORK/a.log")"
pgrep -f "$marker" > /dev/null && fail "a rank outlived the job" && pkill -f "$marker"

# A rank that ignores SIGTERM is killed after the grace period.
marker="gt_launch_$$_b"
bash "$LAUNCH" 2 bash -c "trap '' TERM; [ \$GT_RANK = 0 ] && exit 4; exec -a $marker sleep 60" > "$WORK/b.log" 2>&1
rc=$?
[ $rc -eq 4 ] || fail "a job with a rank that exits 4 exited $rc"
pgrep -f "$marker" > /dev/null && fail "a rank that ignores SIGTERM outlived the job" && pkill -f "$marker"

# Bad arguments.
for args in "0 true" "x true" "2" "2 no-such-command-here"; do
  # shellcheck disable=SC2086
  bash "$LAUNCH" $args > "$WORK/c.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "'launch-local.sh $args' exited $rc, expected 2"
  [ -s "$WORK/c.log" ] || fail "'launch-local.sh $args' said nothing"
done
