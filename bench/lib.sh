# Shared by the GPU-machine suites of bench/run.sh (bench/suites/*.sh; sourced, after cd to the
# repository root and setting OUT): the devrun layout's library path, B = the binaries, and two
# helpers:
#   step TEXT...              prints a heading with the seconds since the start
#   run LIMIT_S LOG COMMAND   runs COMMAND with a time limit, output to $OUT/LOG; prints a line
#                             and returns the exit status when it fails
mkdir -p "$OUT" data
export LD_LIBRARY_PATH=$PWD/devrun/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$PWD/devrun/bin
T0=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
run() {
  local limit=$1 log=$2; shift 2
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && echo "!!! exit $rc: $* (log: $log)"
  return $rc
}
step "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
