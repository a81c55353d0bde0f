# Shared by the gt-serve tests (service.sh, serve_limits.sh, recommend.sh); sourced, not run.
#   serve_workdir NAME       WORK = a fresh temporary folder, removed (and any server killed) on exit
#   die MESSAGE...           FAIL line, the server's log when there is one, exit 1
#   start_server MODEL ARGS  gt-serve ($GT_SERVE) on MODEL with ARGS on a free port; waits until
#                            /healthz says ready; sets SERVER_PID, PORT and URL (HOST6=1: [::1])
#   post PATH BODY, get PATH the request; set CODE and BODY_OUT (the body without its newline)

serve_workdir() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/gt_$1.XXXXXX") || exit 1
  SERVER_PID=
  trap serve_finish EXIT
}
serve_finish() {
  local rc=$?
  [ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
  exit $rc
}

die() {
  echo "FAIL: $*" >&2
  [ ! -f "$WORK/serve.log" ] || { echo "--- server log:" >&2; cat "$WORK/serve.log" >&2; }
  exit 1
}

start_server() {
  local model=$1
  shift
  "$GT_SERVE" "$model" --port 0 --device cpu "$@" >"$WORK/serve.log" 2>&1 &
  SERVER_PID=$!
  PORT=
  for _ in $(seq 1 300); do
    PORT=$(sed -n 's/^gt-serve: listening on .*:\([0-9]*\) .*/\1/p' "$WORK/serve.log")
    [ -n "$PORT" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || die "gt-serve exited during start-up"
    sleep 0.1
  done
  [ -n "$PORT" ] || die "gt-serve did not report its port"
  URL="http://127.0.0.1:$PORT"
  [ "${HOST6:-}" = 1 ] && URL="http://[::1]:$PORT"
  for _ in $(seq 1 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/healthz")" = 200 ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || die "gt-serve exited while loading"
    sleep 0.1
  done
  die "gt-serve never became ready"
}

post() {
  printf '%s' "$2" >"$WORK/body.json"  # a file: a 1 MB body is too long for an argument
  BODY_OUT=$(curl -s -m 30 -w '\n%{http_code}' -H 'Content-Type: application/json' --data-binary @"$WORK/body.json" "$URL$1") ||
    die "curl failed on POST $1"
  CODE=${BODY_OUT##*$'\n'}
  BODY_OUT=${BODY_OUT%$'\n'*}
  BODY_OUT=${BODY_OUT%$'\n'}  # the body's own newline
}
get() {
  BODY_OUT=$(curl -s -m 30 -w '\n%{http_code}' "$URL$1") || die "curl failed on GET $1"
  CODE=${BODY_OUT##*$'\n'}
  BODY_OUT=${BODY_OUT%$'\n'*}
  BODY_OUT=${BODY_OUT%$'\n'}
}
