#!/usr/bin/env bash
# One GPU-machine run on 2 GPUs for the peer watch (framework/distributed/comm.h, PeerWatch): two gt-train
# processes started by hand, without a launcher: clean runs (no false alarm, also with early
# stopping), then one rank killed mid-run (the other must stop on its own within seconds, naming
# it), then rank 0 killed, then each stopped with SIGSTOP (a hang: named after
# train.peer_timeout_s); framework_test and models_test first.
#
#   OUT=<results folder> bash bench/run.sh watch
#
# Assumes (the lead's devrun layout): binaries gt-train gt-data models_test framework_test in
# devrun/bin, their shared libraries in devrun/lib.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/gpu-run-watch}
source bench/lib.sh
for t in framework_test models_test; do
  step "$t"
  run 300 $t.log "$B/$t"
  grep -E "^\[  (PASSED|FAILED) |^\[==========\]" "$OUT/$t.log" | tail -3
  grep -E "^\[  FAILED  \]" "$OUT/$t.log" | sort -u | head -10
done
W=$(mktemp -d)
$B/gt-data synth $W/d.h5 --nodes 20000 > /dev/null
common="--set dataset.path=$W/d.h5 --set train.device=cuda --set train.dkp_cache= --set train.progress=false --set train.save_best= --set train.metrics="
pair() {  # pair EPOCHS VICTIM_RANK AFTER_S [ARGS]: two processes by hand; optionally signal one ($SIG)
  local epochs=$1 victim=$2 after=$3 s0=$(date +%s); shift 3
  GT_WORLD_SIZE=2 GT_RANK=0 GT_LOCAL_RANK=0 GT_MASTER_PORT=29555 $B/gt-train configs/default.yaml $common --set train.epochs=$epochs "$@" > $W/r0.log 2>&1 & p0=$!
  GT_WORLD_SIZE=2 GT_RANK=1 GT_LOCAL_RANK=1 GT_MASTER_PORT=29555 $B/gt-train configs/default.yaml $common --set train.epochs=$epochs "$@" > $W/r1.log 2>&1 & p1=$!
  if [ "$victim" != none ]; then
    sleep $after
    if [ "$victim" = 0 ]; then kill -$SIG $p0; else kill -$SIG $p1; fi
    echo "sent SIG$SIG to rank $victim at $(( $(date +%s) - s0 )) s"
  fi
  ( sleep 60; kill -KILL $p0 $p1 2>/dev/null && echo "!!! still running after 60 s: killed" ) & watchdog=$!
  if [ "$SIG" = STOP ] && [ "$victim" = 0 ]; then  # wait for the running one; then end the stopped one
    wait $p1; e1=$?; kill -KILL $p0; wait $p0; e0=$?
  elif [ "$SIG" = STOP ] && [ "$victim" = 1 ]; then
    wait $p0; e0=$?; kill -KILL $p1; wait $p1; e1=$?
  else
    wait $p0; e0=$?; wait $p1; e1=$?
  fi
  kill $watchdog 2>/dev/null
  echo "exit rank 0: $e0, rank 1: $e1, after $(( $(date +%s) - s0 )) s"
  echo "rank 0: $(grep -E 'error|best valid|early' $W/r0.log | tail -1)"
  echo "rank 1: $(grep -E 'error|best valid|early' $W/r1.log | tail -1)"
}
SIG=KILL
step "clean run, 3 epochs"; pair 3 none 0
step "clean run with early stopping (lr 0, patience 2)"; pair 20 none 0 --set optimizer.lr=0 --set train.patience=2
SIG=KILL
step "rank 1 killed after 8 s of 500 epochs"; pair 500 1 8
step "rank 0 killed after 8 s of 500 epochs"; pair 500 0 8
SIG=STOP  # hangs: the stopped process keeps its sockets open; train.peer_timeout_s=5 names it
step "rank 1 stopped (SIGSTOP) after 8 s of 500 epochs"; pair 500 1 8 --set train.peer_timeout_s=5
step "rank 0 stopped (SIGSTOP) after 8 s of 500 epochs"; pair 500 0 8 --set train.peer_timeout_s=5
