#!/usr/bin/env bash
# Issue 44's "Top-K serving" figures: p50/p99 latency of recommend (POST /v1/recommend) with gt-loadgen.
#
#   [K=20] [CLIENTS="1 8"] [DEVICE=cpu] [SERVE_ARGS=...] bash bench/run.sh serve-recommend MODEL.h5 [DATA.h5] [OUT_DIR]
#
# MODEL.h5 is a link model's weights file (model.embedding_dim > 0: LightGCN or NGCF as a
# recommender, e.g. trained with configs/gowalla-lightgcn.yaml); DATA.h5 the link dataset
# (default: its stored dataset.path). With this checkout's build/: for each of CLIENTS, a fresh
# gt-serve (--device $DEVICE and $SERVE_ARGS) and gt-loadgen --kind recommend --k $K (users
# uniformly random, one per request) for 20 s after 2 s of warm-up; the server's RSS at ready
# and at the end. gt-loadgen's JSON lands in OUT_DIR (default out/serve-recommend); one line per run
# goes to stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-}
DATA=${2:-}
OUT=${3:-out/serve-recommend}
[ -n "$MODEL" ] && [ -f "$MODEL" ] ||
  { echo "bench/run.sh serve-recommend: give a link model's weights file (MODEL.h5), got '$MODEL'" >&2; exit 1; }
[ -x build/gt-serve ] && [ -x build/gt-loadgen ] || { echo "bench/run.sh serve-recommend: build gt-serve and gt-loadgen in build/" >&2; exit 1; }
mkdir -p "$OUT"
SERVER_PID=
trap '[ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null' EXIT
data_args=()
[ -z "$DATA" ] || data_args=(--dataset "$DATA")

field() { grep -o "\"$2\": [-0-9.e+]*" "$1" | head -1 | sed "s/.*: //"; }
rss_mb() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$SERVER_PID/status"; }

for clients in ${CLIENTS:-1 8}; do
  # shellcheck disable=SC2086
  build/gt-serve "$MODEL" "${data_args[@]}" --port 0 --device "${DEVICE:-cpu}" ${SERVE_ARGS:-} >"$OUT/serve.log" 2>&1 &
  SERVER_PID=$!
  PORT=
  for _ in $(seq 1 600); do
    PORT=$(sed -n 's/^gt-serve: listening on .*:\([0-9]*\) .*/\1/p' "$OUT/serve.log")
    [ -n "$PORT" ] && break
    sleep 0.1
  done
  [ -n "$PORT" ] || { echo "no port: $(cat "$OUT/serve.log")" >&2; exit 1; }
  for _ in $(seq 1 3000); do  # the full-graph forward at load
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/healthz")" = 200 ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "gt-serve failed: $(cat "$OUT/serve.log")" >&2; exit 1; }
    sleep 0.1
  done
  ready=$(rss_mb)
  json="$OUT/recommend-k${K:-20}-c$clients.json"
  ./build/gt-loadgen --port "$PORT" --kind recommend --k "${K:-20}" --clients "$clients" --duration 20 --warmup 2 \
    --json "$json" >"$OUT/recommend-c$clients.txt" 2>&1 || true
  printf 'recommend k=%s, %s clients, %s: req/s %8.1f  p50 %7.3f ms  p99 %8.3f ms  max %8.3f ms  errors %s  (RSS at ready %s MB, end %s MB)\n' \
    "${K:-20}" "$clients" "$(sed -n 's/^gt-serve: ready (\(.*\))$/\1/p' "$OUT/serve.log")" \
    "$(field "$json" requests_per_s)" "$(field "$json" p50_ms)" "$(field "$json" p99_ms)" "$(field "$json" max_ms)" \
    "$(field "$json" errors)" "$ready" "$(rss_mb)"
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || true
  SERVER_PID=
done
