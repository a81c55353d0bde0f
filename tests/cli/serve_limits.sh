#!/usr/bin/env bash
# gt-serve's limits against misbehaving clients, run by ctest as
#   bash tests/cli/serve_limits.sh GT_DATA GT_TRAIN GT_SERVE GT_LOADGEN
# Each misbehaviour of issue 49's audit is played by gt-loadgen beside a measured well-behaved
# client, and each must be refused:
#   - slow senders (a header byte every 0.3 s) held their connections for ever and filled a server
#     of --max-connections 2: now each is dropped at --request-timeout-s and the measured client is
#     served throughout;
#   - non-readers held ~37 MB each until the idle timeout: now an answer not taken within
#     --write-timeout-s is dropped with its connection, the bytes held stay under
#     --max-queued-bytes and the resident memory under its bound;
#   - abandoned large requests were computed anyway and held later requests back by seconds: now
#     nothing is computed for a client that has gone, and the measured client's answers stay fast.
# Exits nonzero with a message on the first failed check.
set -u

if [ $# -ne 4 ]; then
  echo "usage: bash $0 GT_DATA GT_TRAIN GT_SERVE GT_LOADGEN" >&2
  exit 2
fi
GT_DATA=$1
GT_TRAIN=$2
GT_SERVE=$3
GT_LOADGEN=$4

. "$(dirname "$0")/serve_lib.sh"
serve_workdir serve_limits

"$GT_DATA" synth "$WORK/data.h5" --nodes 3000 --avg-degree 8 --features 16 --classes 4 --seed 5 >/dev/null ||
  die "gt-data synth failed"
cat >"$WORK/train.yaml" <<YAML
model: {type: sage, hidden: 32, layers: 2}
dataset: {path: $WORK/data.h5}
sampling: {fanouts: [5, 5], batch_size: 256}
train: {epochs: 1, device: cpu, progress: false, metrics: "", save_best: "$WORK/model.h5"}
YAML
"$GT_TRAIN" "$WORK/train.yaml" >"$WORK/train.log" 2>&1 || die "training failed: $(cat "$WORK/train.log")"

stop_server() {
  kill -TERM "$SERVER_PID"
  for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$SERVER_PID" 2>/dev/null && die "gt-serve did not stop on SIGTERM"
  wait "$SERVER_PID" || die "gt-serve exited with status $?"
  SERVER_PID=
}
metric() {  # metric NAME{LABELS}: its value on the running server
  curl -s "http://127.0.0.1:$PORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}
json_field() {  # json_field FILE KEY: a number of gt-loadgen's --json (one key a line)
  sed -n "s/^ *\"$2\": \([-0-9.e+]*\),\?$/\1/p" "$1" | head -1
}

# --- slow senders: two of them and the measured client on a server of --max-connections 3 ---
start_server "$WORK/model.h5" --max-connections 3 --request-timeout-s 1
"$GT_LOADGEN" --port "$PORT" --clients 1 --duration 4 --warmup 0.2 --misbehave slow-sender --misbehaving-clients 2 \
  --misbehave-interval-s 0.3 --json "$WORK/slow.json" >"$WORK/load.txt" 2>&1 ||
  die "the measured client failed beside slow senders: $(cat "$WORK/load.txt")"
ended=$(json_field "$WORK/slow.json" ended_by_server)
held=$(json_field "$WORK/slow.json" max_held_s)
[ "${ended:-0}" -ge 4 ] || die "slow senders: the server ended $ended of their connections in 4 s (--request-timeout-s 1): $(cat "$WORK/load.txt")"
awk -v h="$held" 'BEGIN { exit !(h > 0.5 && h < 2.0) }' || die "a slow sender held its connection for $held s (--request-timeout-s 1)"
timeouts=$(metric 'gt_http_connections_dropped_total{reason="request_timeout"}')
[ "${timeouts:-0}" -ge 4 ] || die "metrics: $timeouts connections dropped for request_timeout"
# A connection that sends nothing is dropped at the same deadline (it held a slot until the idle timeout).
exec 3<>"/dev/tcp/127.0.0.1/$PORT" || die "cannot connect"
IFS= read -r -t 5 REPLY <&3
rc=$?
[ $rc -ne 142 ] && [ $rc -le 128 ] || die "a silent connection was not dropped within 5 s (--request-timeout-s 1): read status $rc"
exec 3>&-
stop_server
echo "ok: slow senders are dropped at --request-timeout-s ($ended connections, held at most $held s)"

# --- non-readers: requests for 2000 embeddings (~1 MB of JSON each), never read ---
start_server "$WORK/model.h5" --write-timeout-s 2 --send-buffer-bytes 4096 --max-queued-bytes 3000000
rss0=$(metric gt_process_resident_memory_bytes)
"$GT_LOADGEN" --port "$PORT" --clients 1 --duration 4 --warmup 0.2 --misbehave non-reader --misbehaving-clients 8 \
  --misbehave-nodes 2000 --misbehave-interval-s 0.05 --json "$WORK/nonreader.json" >"$WORK/load.txt" 2>&1 ||
  die "the measured client failed beside non-readers: $(cat "$WORK/load.txt")"
ended=$(json_field "$WORK/nonreader.json" ended_by_server)
held=$(json_field "$WORK/nonreader.json" max_held_s)
[ "${ended:-0}" -ge 4 ] || die "non-readers: the server ended $ended of their connections (--write-timeout-s 2): $(cat "$WORK/load.txt")"
drops=$(metric 'gt_http_connections_dropped_total{reason="write_timeout"}')
[ "${drops:-0}" -ge 4 ] || die "metrics: $drops connections dropped for write_timeout"
refusals=$(metric gt_http_queued_answer_refusals_total)
# An answer of 2000 x 32 floats is bounded at ~2.3 MB: a second one held at the same time is refused.
[ "${refusals:-0}" -ge 1 ] || die "8 non-readers of ~1 MB answers never met --max-queued-bytes 3000000"
[ "$(metric gt_http_queued_answer_bytes)" = 0 ] || die "bytes still held after the non-readers: $(metric gt_http_queued_answer_bytes)"
rss1=$(metric gt_process_resident_memory_bytes)
# The bound of docs/serving.md: RSS at ready + --max-queued-bytes + per connection (body cap,
# ids, buffers, a thread's stack touched) 1.3 MB x 9 connections; 32 MB of slack for the allocator.
bound=$((rss0 + 3000000 + 9 * 1300000 + 32000000))
[ "$rss1" -le "$bound" ] || die "resident memory $rss1 over its bound $bound (at ready: $rss0)"
stop_server
echo "ok: non-readers are dropped at --write-timeout-s, answers beyond --max-queued-bytes refused ($ended connections), RSS $((rss1 / 1000000)) MB <= $((bound / 1000000)) MB"

# --- abandoners: requests for 30000 embeddings each, the connection closed at once ---
start_server "$WORK/model.h5" --max-batch 64
"$GT_LOADGEN" --port "$PORT" --clients 1 --duration 4 --warmup 0.2 --misbehave abandoner --misbehaving-clients 4 \
  --misbehave-nodes 30000 --misbehave-interval-s 0.2 --json "$WORK/abandon.json" >"$WORK/load.txt" 2>&1 ||
  die "the measured client failed beside abandoners: $(cat "$WORK/load.txt")"
gone=$(metric 'gt_http_connections_dropped_total{reason="client_gone"}')
requests=$(json_field "$WORK/abandon.json" requests)
cancelled=$(metric 'gt_inference_requests_total{result="cancelled"}')
nodes=$(sed -n 's/^gt_inference_batch_nodes_sum \([0-9]*\)$/\1/p' <(curl -s "http://127.0.0.1:$PORT/metrics"))
conns=$(json_field "$WORK/abandon.json" connections)
[ "${gone:-0}" -ge 10 ] || die "only $gone of $conns abandoned requests were seen as abandoned"
# Computed for all of them, the abandoned rows alone would be $conns x 30000; a request seen as
# abandoned after it was queued may have had a few micro-batches run (20 ms between looks).
[ "$nodes" -lt $((conns * 30000 / 10)) ] ||
  die "$nodes nodes computed for $requests one-node requests beside $conns abandoned 30000-node ones"
p99=$(json_field "$WORK/abandon.json" p99_ms)
awk -v p="$p99" 'BEGIN { exit !(p < 1000) }' || die "the measured client's p99 was $p99 ms beside abandoners"
stop_server
echo "ok: abandoned requests are not computed ($gone seen, $cancelled cancelled in the queue; measured p99 $p99 ms)"
echo "serve_limits.sh: all checks passed"
