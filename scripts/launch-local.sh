#!/usr/bin/env bash
# Runs one data-parallel job of N processes on this host (docs/scaling.md): process r gets
# GT_WORLD_SIZE=N, GT_RANK=r and GT_LOCAL_RANK=r (so it trains on the GPUs from
# cuda:(r * train.replicas)), and the command's output lines are prefixed with "[rank r] ".
#
#   scripts/launch-local.sh N COMMAND [ARGS...]
#   scripts/launch-local.sh 2 ./build/gt-train cfg.yaml --set train.device=cuda
#
# When one process fails, the others are stopped (SIGTERM, then SIGKILL after 10 s): a process
# waiting in an NCCL collective for a peer that died would otherwise wait for ever. The exit
# status is the first failure's (0 when every process succeeded). GT_MASTER_PORT and the other
# variables of docs/scaling.md pass through; Ctrl-C stops them all.
set -uo pipefail

usage() {
  echo "usage: $0 N COMMAND [ARGS...]  (N processes of one job on this host)" >&2
  exit 2
}
[ $# -ge 2 ] || usage
n=$1
shift
if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 1024 ]; then
  echo "$0: the process count must be an integer in [1, 1024], got '$n'" >&2
  exit 2
fi
if ! command -v "$1" > /dev/null; then
  echo "$0: cannot run '$1': no such command" >&2
  exit 2
fi

# Every rank runs in a session and process group of its own (setsid), which stop_all signals
# whole: the command, its children and the prefixing sed.
pids=()
stop_all() {
  local sig=$1
  for p in "${pids[@]}"; do kill "-$sig" -- "-$p" 2> /dev/null; done
}
on_signal() {
  stop_all TERM
  wait
  exit 130
}
trap on_signal INT TERM HUP

for ((r = 0; r < n; r++)); do
  GT_WORLD_SIZE=$n GT_RANK=$r GT_LOCAL_RANK=$r setsid bash -c \
    'set -o pipefail; rank=$1; shift; "$@" 2>&1 | sed -u "s/^/[rank $rank] /"' launch-rank "$r" "$@" &
  pids+=($!)
done

# Polls rather than `wait -n`: bash forgets a job that ended while another was being started
# (the killer below), and `wait -n` would then never report it. `wait PID` still has its status.
status=0
left=$n
killer=""
declare -A collected
while [ "$left" -gt 0 ]; do
  for i in "${!pids[@]}"; do
    p=${pids[$i]}
    if [ -n "${collected[$i]:-}" ] || kill -0 "$p" 2> /dev/null; then continue; fi
    wait "$p"
    rc=$?
    collected[$i]=1
    left=$((left - 1))
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$rc
      echo "$0: rank $i exited with status $rc; stopping the others" >&2
      stop_all TERM
      # Those still running after 10 s are killed.
      (sleep 10 && stop_all KILL) &
      killer=$!
    fi
  done
  [ "$left" -gt 0 ] && sleep 0.2
done
# After a failure, a rank's wrapper may be gone while its command lingers (it ignores SIGTERM):
# wait until every rank's process group is empty (the killer ends them after 10 s).
if [ "$status" -ne 0 ]; then
  for p in "${pids[@]}"; do
    while kill -0 -- "-$p" 2> /dev/null; do sleep 0.2; done
  done
fi
if [ -n "$killer" ]; then kill "$killer" 2> /dev/null; fi
exit "$status"
