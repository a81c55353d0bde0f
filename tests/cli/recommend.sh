#!/usr/bin/env bash
# Serving a link model (a recommender) end to end, run by ctest as
#   bash tests/cli/recommend.sh GT_DATA MAKE_LINK_MODEL GT_SERVE GT_LOADGEN GT_PREDICT
# Imports a small generated recommendation dataset (gt-data import-rec), writes a LightGCN weights
# file with random weights (test_make_link_model, as Trainer::save writes one), starts gt-serve on a
# free port, asks POST /v1/recommend and /v1/score with curl (good and bad requests; a node-model
# request to a link model), runs gt-loadgen --kind recommend for a second, and writes the
# embeddings with gt-predict (.h5 and .csv). Then a link encoder: a GraphSAGE with random weights
# over the features of a link-split synthetic graph (test_make_link_model ... sage), served by
# gt-serve: /v1/embed, /v1/score (a score equals the dot product of the embeddings) and
# /v1/recommend, predict refused. Exits nonzero with a message on the first failed check.
set -u

if [ $# -ne 5 ]; then
  echo "usage: bash $0 GT_DATA MAKE_LINK_MODEL GT_SERVE GT_LOADGEN GT_PREDICT" >&2
  exit 2
fi
GT_DATA=$1
MAKE_LINK_MODEL=$2
GT_SERVE=$3
GT_LOADGEN=$4
GT_PREDICT=$5

. "$(dirname "$0")/serve_lib.sh"
serve_workdir recommend

# --- 30 users, 20 items: user u has items u % 20, (u + 3) % 20 and (u * 7) % 20; user 0 all but 3 ---
mkdir -p "$WORK/rec"
: >"$WORK/rec/train.txt"
: >"$WORK/rec/test.txt"
for u in $(seq 0 29); do
  if [ "$u" = 0 ]; then
    echo "0 $(seq -s ' ' 0 16)" >>"$WORK/rec/train.txt"
    echo "0 17" >>"$WORK/rec/test.txt"
    continue
  fi
  a=$((u % 20)) b=$(((u + 3) % 20)) c=$(((u * 7) % 20))
  echo "$u $a $b $c" >>"$WORK/rec/train.txt"
  echo "$u $(((u + 11) % 20))" >>"$WORK/rec/test.txt"
done
"$GT_DATA" import-rec "$WORK/rec" "$WORK/rec.h5" >"$WORK/import.log" 2>&1 || die "import-rec: $(cat "$WORK/import.log")"
"$MAKE_LINK_MODEL" "$WORK/rec.h5" "$WORK/lightgcn.h5" lightgcn >/dev/null || die "writing the link model failed"
echo "ok: a link dataset and a LightGCN weights file"

# --- gt-serve on it ---
start_server "$WORK/lightgcn.h5" --max-wait-us 200 --max-request-ids 64
grep -q "^gt-serve: ready (link model: 50 nodes, users \[0, 30), items \[30, 50), dim 16" "$WORK/serve.log" ||
  die "ready line: $(cat "$WORK/serve.log")"


BODY_OUT=$(curl -s "$URL/v1/info")
[[ $BODY_OUT == *'"items":[30,50]'*'"link":true'*'"users":[0,30]'* ]] || die "info: $BODY_OUT"

# User 5 saw items 5, 8 and 15 (nodes 35, 38, 45): 5 others, none of those.
post /v1/recommend '{"user": 5, "k": 5}'
[ "$CODE" = 200 ] || die "recommend 5 5: $CODE $BODY_OUT"
re='^\{"items":\[([0-9]+),([0-9]+),([0-9]+),([0-9]+),([0-9]+)\],"scores":\[[^]]*\],"user":5\}$'
[[ $BODY_OUT =~ $re ]] || die "recommend 5 5: $BODY_OUT"
for i in 1 2 3 4 5; do
  item=${BASH_REMATCH[$i]}
  [ "$item" -ge 30 ] && [ "$item" -lt 50 ] || die "recommend 5 5: item $item is not an item node: $BODY_OUT"
  case $item in 35 | 38 | 45) die "recommend 5 5: seen item $item: $BODY_OUT" ;; esac
done
first=$BODY_OUT
# The same again, and the same user in the batch form.
post /v1/recommend '{"user": 5, "k": 5}'
[ "$BODY_OUT" = "$first" ] || die "recommend 5 5 again: $BODY_OUT vs $first"
post /v1/recommend '{"users": [5, 6], "k": 5}'
[ "$CODE" = 200 ] && [[ $BODY_OUT == '{"recommendations":['"${first%$'\n'}"',{"items":['* ]] || die "batch: $CODE $BODY_OUT"
# User 0 saw 17 of the 20 items: 3 are left; with the seen ones kept the list is full.
post /v1/recommend '{"user": 0, "k": 10}'
re='^\{"items":\[[0-9]+,[0-9]+,[0-9]+\],'
[ "$CODE" = 200 ] && [[ $BODY_OUT =~ $re ]] || die "recommend 0 10: $CODE $BODY_OUT"
post /v1/recommend '{"user": 0, "k": 10, "exclude_seen": false}'
re='^\{"items":\[([0-9]+,){9}[0-9]+\],'
[ "$CODE" = 200 ] && [[ $BODY_OUT =~ $re ]] || die "recommend 0 10 seen kept: $CODE $BODY_OUT"
echo "ok: POST /v1/recommend"

# score: the first recommended item's score equals the one recommend reported (to rounding).
item=$(sed 's/^{"items":\[\([0-9]*\),.*/\1/' <<<"$first")
score=$(sed 's/.*"scores":\[\([^],]*\).*/\1/' <<<"$first")
post /v1/score "{\"pairs\": [[5, $item], [6, 30]]}"
re='^\{"scores":\[([^,]+),[^,]+\]\}$'
[ "$CODE" = 200 ] && [[ $BODY_OUT =~ $re ]] || die "score: $CODE $BODY_OUT"
awk -v a="${BASH_REMATCH[1]}" -v b="$score" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * (1 + (b < 0 ? -b : b))) }' ||
  die "score of (5, $item) = ${BASH_REMATCH[1]}, recommend said $score"
echo "ok: POST /v1/score"

# --- bad requests: 400 with one line naming the problem ---
check_error() {  # check_error PATH BODY CODE TEXT
  post "$1" "$2"
  [ "$CODE" = "$3" ] && [[ $BODY_OUT == '{"error":"'*"$4"* ]] || die "$1 $2: expected $3 '$4', got $CODE $BODY_OUT"
}
check_error /v1/recommend '{"user": 35, "k": 5}' 400 "node 35 is an item, not a user"
check_error /v1/recommend '{"user": 99, "k": 5}' 400 "user 99 is out of range [0, 50)"
check_error /v1/recommend '{"user": 1, "k": 0}' 400 "k = 0 is out of range [1, 20]"
check_error /v1/recommend '{"user": 1, "k": 21}' 400 "k = 21 is out of range [1, 20]"
check_error /v1/recommend '{"user": 1, "users": [2]}' 400 'give \"user\" or \"users\", not both'
check_error /v1/recommend '{"user": "a"}' 400 '\"user\" is a string, not a node id'
check_error /v1/recommend '{"nodes": [1]}' 400 'unknown key \"nodes\"'
check_error /v1/recommend '{"user": 1.5}' 400 '\"user\" is the number 1.5 (not an integer), not a node id'
check_error /v1/recommend '{"user": 18446744073709551615}' 400 '\"user\" = 18446744073709551615 is out of range'
check_error /v1/recommend '{"users": 3, "k": 1}' 400 '\"users\" is the number'
check_error /v1/recommend '[1, 2]' 400 'the body is an array, not an object'
check_error /v1/recommend 'not json' 400 "not valid JSON"
check_error /v1/recommend "{\"users\": [$(seq -s , 1 65)], \"k\": 1}" 413 "more than the server's --max-request-ids 64"
check_error /v1/score '{"pairs": [[35, 5]]}' 400 "node 35 is not a user"
check_error /v1/score '{"pairs": [[5]]}' 400 'is not a pair'
check_error /v1/predict '{"nodes": [1]}' 400 "predict: the model is a link model (model.type lightgcn"
post /v1/embed '{"nodes": [5, 35]}'
re='^\{"embeddings":\[\[[^]]*\],\[[^]]*\]\]\}$'
[ "$CODE" = 200 ] && [[ $BODY_OUT =~ $re ]] || die "embed: $CODE $BODY_OUT"
BODY_OUT=$(curl -s -m 5 -X GET "$URL/v1/recommend")
[[ $BODY_OUT == *"use POST"* ]] || die "GET /v1/recommend: $BODY_OUT"
echo "ok: bad requests"

# --- gt-loadgen --kind recommend, a second ---
"$GT_LOADGEN" --port "$PORT" --kind recommend --k 5 --clients 4 --duration 1 --warmup 0.2 --json "$WORK/load.json" \
  >"$WORK/load.txt" 2>&1 || die "gt-loadgen --kind recommend failed: $(cat "$WORK/load.txt")"
grep -q '"kind": "recommend"' "$WORK/load.json" && grep -q '"p99_ms"' "$WORK/load.json" && grep -q '"errors": 0' "$WORK/load.json" ||
  die "loadgen json: $(cat "$WORK/load.json")"
"$GT_LOADGEN" --port "$PORT" --kind recommend --nodes 3 --k 2 --clients 2 --duration 0.5 --warmup 0 >"$WORK/load.txt" 2>&1 ||
  die "gt-loadgen --kind recommend --nodes 3 failed: $(cat "$WORK/load.txt")"
curl -s "$URL/metrics" | grep -q 'gt_http_requests_total{endpoint="/v1/recommend",code="200"}' || die "metrics: no /v1/recommend"
echo "ok: gt-loadgen --kind recommend"

kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || die "gt-serve exited with $? on SIGTERM"
SERVER_PID=

# --- gt-predict writes a link model's embeddings ---
"$GT_PREDICT" "$WORK/lightgcn.h5" "$WORK/emb.csv" --device cpu >"$WORK/predict.log" 2>&1 || die "gt-predict csv: $(cat "$WORK/predict.log")"
[ "$(head -1 "$WORK/emb.csv" | tr ',' '\n' | wc -l)" = 17 ] && [ "$(head -1 "$WORK/emb.csv" | cut -d, -f1-2)" = node_id,emb_0 ] ||
  die "csv header: $(head -1 "$WORK/emb.csv")"
[ "$(wc -l <"$WORK/emb.csv")" = 51 ] || die "csv rows: $(wc -l <"$WORK/emb.csv")"
"$GT_PREDICT" "$WORK/lightgcn.h5" "$WORK/emb.h5" --ids 5,35 --device cpu >"$WORK/predict.log" 2>&1 ||
  die "gt-predict h5: $(cat "$WORK/predict.log")"
grep -q "^2 nodes (--ids) of .* link model .* (dim 16)" "$WORK/predict.log" || die "gt-predict output: $(cat "$WORK/predict.log")"
"$GT_PREDICT" "$WORK/lightgcn.h5" "$WORK/emb2.csv" --split test >/dev/null 2>"$WORK/err.txt" && die "--split on a link model succeeded"
grep -q "\-\-split applies to node models" "$WORK/err.txt" || die "--split on a link model: $(cat "$WORK/err.txt")"
echo "ok: gt-predict writes a link model's embeddings"

# --- a link encoder over node features: /v1/embed and /v1/score ---
"$GT_DATA" synth "$WORK/g.h5" --nodes 80 --avg-degree 4 --features 6 --classes 2 --undirected --seed 3 >/dev/null ||
  die "gt-data synth failed"
"$GT_DATA" link-split "$WORK/g.h5" "$WORK/g-link.h5" --seed 1 >/dev/null || die "gt-data link-split failed"
"$MAKE_LINK_MODEL" "$WORK/g-link.h5" "$WORK/sage.h5" sage >/dev/null || die "writing the link encoder failed"
start_server "$WORK/sage.h5" --max-wait-us 200
grep -q "^gt-serve: ready (link encoder: 80 nodes, users \[0, 80), items \[0, 80), dim 16" "$WORK/serve.log" ||
  die "encoder ready line: $(cat "$WORK/serve.log")"
post /v1/embed '{"nodes": [4, 9]}'
re='^\{"embeddings":\[\[([^]]*)\],\[([^]]*)\]\]\}$'
[ "$CODE" = 200 ] && [[ $BODY_OUT =~ $re ]] || die "encoder embed: $CODE $BODY_OUT"
a=${BASH_REMATCH[1]} b=${BASH_REMATCH[2]}
[ "$(tr ',' '\n' <<<"$a" | wc -l)" = 16 ] || die "encoder embed: not 16 wide: $BODY_OUT"
post /v1/score '{"pairs": [[4, 9], [9, 4]]}'
re='^\{"scores":\[([^,]+),([^,]+)\]\}$'
[ "$CODE" = 200 ] && [[ $BODY_OUT =~ $re ]] || die "encoder score: $CODE $BODY_OUT"
awk -v s="${BASH_REMATCH[1]}" -v t="${BASH_REMATCH[2]}" -v a="$a" -v b="$b" 'BEGIN {
  n = split(a, x, ","); split(b, y, ","); d = 0; for (i = 1; i <= n; i++) d += x[i] * y[i]
  e = s - d; if (e < 0) e = -e; m = d < 0 ? -d : d; exit !(e <= 1e-5 * (1 + m) && s == t) }' ||
  die "encoder score (4, 9) = ${BASH_REMATCH[1]}, (9, 4) = ${BASH_REMATCH[2]}, not the embeddings' dot product"
check_error /v1/score '{"pairs": [[4, 80]]}' 400 "is out of range [0, 80)"
check_error /v1/predict '{"nodes": [1]}' 400 "predict: the model is a link encoder (model.type sage)"
# recommend: 3 items, not node 4 itself (seen), the first one's score that of /v1/score.
post /v1/recommend '{"user": 4, "k": 3}'
re='^\{"items":\[([0-9]+),[0-9]+,[0-9]+\],"scores":\[([^],]+),[^]]*\],"user":4\}$'
[ "$CODE" = 200 ] && [[ $BODY_OUT =~ $re ]] || die "encoder recommend: $CODE $BODY_OUT"
item=${BASH_REMATCH[1]} rscore=${BASH_REMATCH[2]}
[ "$item" != 4 ] || die "encoder recommend: node 4 itself: $BODY_OUT"
post /v1/score "{\"pairs\": [[4, $item]]}"
[[ $BODY_OUT =~ ^\{\"scores\":\[([^]]+)\]\}$ ]] || die "encoder score (4, $item): $BODY_OUT"
awk -v a="${BASH_REMATCH[1]}" -v b="$rscore" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * (1 + (b < 0 ? -b : b))) }' ||
  die "encoder: score of (4, $item) = ${BASH_REMATCH[1]}, recommend said $rscore"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || die "gt-serve (encoder) exited with $? on SIGTERM"
SERVER_PID=
"$GT_PREDICT" "$WORK/sage.h5" "$WORK/sage.csv" --device cpu >"$WORK/predict.log" 2>&1 ||
  die "gt-predict (encoder): $(cat "$WORK/predict.log")"
[ "$(wc -l <"$WORK/sage.csv")" = 81 ] && [ "$(head -1 "$WORK/sage.csv" | tr ',' '\n' | wc -l)" = 17 ] ||
  die "gt-predict (encoder) csv: $(head -2 "$WORK/sage.csv")"
grep -q "^80 nodes (all) of .* link encoder .* (dim 16)" "$WORK/predict.log" || die "gt-predict (encoder): $(cat "$WORK/predict.log")"
echo "ok: a link encoder answers /v1/embed, /v1/score and /v1/recommend; gt-predict writes its embeddings"
