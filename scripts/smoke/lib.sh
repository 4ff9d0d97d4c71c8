# Helpers for the smoke tests: start the real binary and an origin, stop them by PID.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="$(mktemp -d)"
PIDS=()
# Stops what this test started, then waits for it (a daemon still shutting down writes its
# database's -wal and -shm files; removing the directory under it races those writes).
stop_started() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
cleanup() {
  stop_started
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() { echo "   $*" >&2; exit 1; }

# start_origin: sets ORIGIN (http://127.0.0.1:PORT)
start_origin() {
  mkfifo "$WORK/origin.in"
  python3 "$ROOT/scripts/testorigin.py" < "$WORK/origin.in" > "$WORK/origin.out" &
  PIDS+=($!)
  exec 7> "$WORK/origin.in"  # holding the fifo open keeps the origin alive
  for _ in $(seq 100); do grep -q PORT "$WORK/origin.out" 2>/dev/null && break; sleep 0.05; done
  ORIGIN="http://127.0.0.1:$(awk '/PORT/{print $2}' "$WORK/origin.out")"
}

# start_thumbd ARGS...: runs `thumbd serve --listen 127.0.0.1:0 ARGS`; sets THUMBD (base URL) and THUMBD_PID
start_thumbd() {
  "$SMOKE_THUMBD" serve --listen 127.0.0.1:0 "$@" > "$WORK/thumbd.out" 2> "$WORK/thumbd.err" &
  THUMBD_PID=$!
  PIDS+=($THUMBD_PID)
  local started=$SECONDS
  # Up to 30 s: it starts in ~0.1 s, but these machines are shared; a slow start is reported.
  for _ in $(seq 600); do
    grep -q listening "$WORK/thumbd.out" 2>/dev/null && break
    kill -0 "$THUMBD_PID" 2>/dev/null || break
    sleep 0.05
  done
  THUMBD="$(awk '/listening on/{print $4}' "$WORK/thumbd.out")"
  if [ -z "$THUMBD" ]; then
    if kill -0 "$THUMBD_PID" 2>/dev/null; then echo "   still running, not listening" >&2
    else local status=0; wait "$THUMBD_PID" || status=$?; echo "   exited with status $status" >&2; fi
    echo "   stdout:" >&2; cat "$WORK/thumbd.out" >&2
    echo "   stderr:" >&2; cat "$WORK/thumbd.err" >&2
    fail "thumbd did not start within $((SECONDS - started)) s"
  fi
  [ $((SECONDS - started)) -lt 3 ] || echo "   (thumbd took $((SECONDS - started)) s to start)"
}

urlencode() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
