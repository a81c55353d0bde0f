#!/usr/bin/env bash
# Issue 49's serving figures (docs/benchmarks.md, section 10 "Serving"):
#
#   [SERVE_ARGS="--max-batch 1024"] [KINDS="none non-reader"] bash bench/run.sh serve [OUT_DIR] [LINE_SERVE LINE_LOADGEN]
#
# On the README's default model (bash scripts/train-default.sh: out/default/best-model.h5) and
# this checkout's build/:
#   1. a measured client alone (1 connection, single-node /v1/predict, 20 s), then beside 300
#      misbehaving clients of each kind (slow senders, a byte every 2 s; non-readers of 4096-node
#      embeddings; abandoners of 16,384-node requests, one each every 5 s), each on a fresh
#      gt-serve with its default options and $SERVE_ARGS; the server's peak RSS (VmHWM) after each;
#   2. with LINE_SERVE and LINE_LOADGEN (gt-serve and gt-loadgen of a build before issue 49, the
#      line protocol), throughput and p50/p99 of single-node requests with 1 and 8 clients, line
#      protocol and HTTP in turn, twice.
# gt-loadgen's JSON lands in OUT_DIR (default out/serve-bench); one line per run goes to stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-out/serve-bench}
LINE_SERVE=${2:-}
LINE_LOADGEN=${3:-}
MODEL=out/default/best-model.h5
[ -f "$MODEL" ] || { echo "bench/run.sh serve: no $MODEL (run bash scripts/train-default.sh first)" >&2; exit 1; }
mkdir -p "$OUT"
SERVER_PID=
trap '[ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null' EXIT

# start SERVE_BINARY ARGS...: sets SERVER_PID and PORT; waits until the model answers.
start() {
  local bin=$1
  shift
  "$bin" "$MODEL" --port 0 --device cpu "$@" >"$OUT/serve.log" 2>&1 &
  SERVER_PID=$!
  PORT=
  for _ in $(seq 1 300); do
    PORT=$(sed -n 's/^gt-serve: listening on .*:\([0-9]*\) .*/\1/p' "$OUT/serve.log")
    [ -n "$PORT" ] && break
    sleep 0.1
  done
  [ -n "$PORT" ] || { echo "no port: $(cat "$OUT/serve.log")" >&2; exit 1; }
  sleep 1  # the model loads (the HTTP server also says so on /healthz; gt-loadgen waits for it too)
}
stop() {
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || true
  SERVER_PID=
}
hwm_mb() { awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$SERVER_PID/status"; }
rss_mb() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$SERVER_PID/status"; }
field() { grep -o "\"$2\": [-0-9.e+]*" "$1" | head -1 | sed "s/.*: //"; }
row() {  # row LABEL JSON [extra]
  printf '%-34s req/s %8.1f  p50 %7.3f ms  p99 %8.3f ms  max %8.3f ms  errors %s %s\n' "$1" \
    "$(field "$2" requests_per_s)" "$(field "$2" p50_ms)" "$(field "$2" p99_ms)" "$(field "$2" max_ms)" \
    "$(field "$2" errors)" "${3:-}"
}

# 1. Misbehaving clients, 300 of each kind, beside one measured client.
declare -A ARGS=(
  [slow-sender]="--misbehave-interval-s 2"
  [non-reader]="--misbehave-nodes 4096 --misbehave-interval-s 1"
  # 16,384 embeddings (charged 36 MiB): an answer of 65,536 would not fit in the default
  # --max-queued-bytes and be refused (413) before anything is computed, leaving nothing to abandon.
  [abandoner]="--misbehave-nodes 16384 --misbehave-interval-s 5"
)
for kind in ${KINDS:-none slow-sender non-reader abandoner}; do
  # shellcheck disable=SC2086
  start build/gt-serve ${SERVE_ARGS:-}
  ready=$(rss_mb)
  extra=()
  [ "$kind" = none ] || extra=(--misbehave "$kind" --misbehaving-clients 300 ${ARGS[$kind]})
  ./build/gt-loadgen --port "$PORT" --clients 1 --nodes 1 --duration 20 --warmup 2 "${extra[@]}" \
    --json "$OUT/misbehave-$kind.json" >"$OUT/misbehave-$kind.txt" 2>&1 || true
  row "http, beside 300 x $kind" "$OUT/misbehave-$kind.json" "(server RSS at ready $ready MB, peak $(hwm_mb) MB)"
  grep '^misbehaving' "$OUT/misbehave-$kind.txt" || true
  curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^gt_http_connections_(total|dropped_total)|cancelled' >"$OUT/metrics-$kind.txt" || true
  stop
done

# 2. The line protocol against HTTP, single-node requests (default options).
if [ -n "$LINE_SERVE" ]; then
  for rep in 1 2; do
    for clients in 1 8; do
      start "$LINE_SERVE"
      "$LINE_LOADGEN" --port "$PORT" --clients "$clients" --nodes 1 --duration 10 --warmup 1 \
        --json "$OUT/line-c$clients-r$rep.json" >/dev/null 2>&1 || true
      row "line protocol, $clients clients (run $rep)" "$OUT/line-c$clients-r$rep.json"
      stop
      start build/gt-serve
      ./build/gt-loadgen --port "$PORT" --clients "$clients" --nodes 1 --duration 10 --warmup 1 \
        --json "$OUT/http-c$clients-r$rep.json" >/dev/null 2>&1 || true
      row "http, $clients clients (run $rep)" "$OUT/http-c$clients-r$rep.json"
      stop
    done
  done
fi
