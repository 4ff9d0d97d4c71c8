#!/usr/bin/env bash
# The Swift client library (ThumbdClient.DaemonClient, through `thumbd warm`) across a
# daemon restart: the batch's stream drops at the SIGTERM, and the client reconnects with
# Last-Event-ID once the daemon is back on the same port and cache file; every item ends
# done, none twice. The server is named by host name (localhost), not an IP literal.
source "$(dirname "$0")/lib.sh"
start_origin
export THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true
start_thumbd --db "$WORK/cache.sqlite"
port="${THUMBD##*:}"
tag="restart-$$"
printf '%s\n%s\n' "$ORIGIN/img/$tag.jpg" "$ORIGIN/gate/$tag" > "$WORK/urls"
"$SMOKE_THUMBD" warm "$WORK/urls" --json --server "http://localhost:$port" > "$WORK/events" 2> "$WORK/warm.err" &
warm=$!
PIDS+=($warm)
for _ in $(seq 200); do grep -q '"event":"done"' "$WORK/events" 2>/dev/null && break; sleep 0.05; done
grep -q '"event":"done"' "$WORK/events" || fail "the quick item was not done: $(cat "$WORK/events" "$WORK/warm.err")"
for _ in $(seq 200); do curl -s "$ORIGIN/__stats" | grep -q "/gate/$tag" && break; sleep 0.05; done
kill -TERM "$THUMBD_PID"
wait "$THUMBD_PID" || fail "the daemon did not stop cleanly"
"$SMOKE_THUMBD" serve --listen "127.0.0.1:$port" --db "$WORK/cache.sqlite" > "$WORK/thumbd2.out" 2> "$WORK/thumbd2.err" &
PIDS+=($!)
for _ in $(seq 200); do grep -q listening "$WORK/thumbd2.out" 2>/dev/null && break; sleep 0.05; done
curl -s "$ORIGIN/__release/$tag" > /dev/null
for _ in $(seq 600); do kill -0 "$warm" 2>/dev/null || break; sleep 0.05; done
wait "$warm" || fail "warm failed across the restart: $(cat "$WORK/warm.err")"
python3 - "$WORK/events" <<'PY'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
kinds = [e["event"] for e in events]
done = sorted(e["data"]["index"] for e in events if e["event"] == "done")
assert kinds[0] == "opened" and kinds[-1] == "end", kinds
assert "shutdown" in kinds, f"no shutdown event: {kinds}"
assert done == [0, 1], f"done {done}: {kinds}"
assert events[-1]["data"]["done"] == 2, events[-1]
print(f"   {len(events)} events; the stream resumed after the restart; both items done once")
PY
echo "   ok"
