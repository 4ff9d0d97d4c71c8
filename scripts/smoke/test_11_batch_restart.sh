#!/usr/bin/env bash
# A batch across a crash: kill -9 mid-batch (four items done, one held at the origin),
# restart on the same file; the batch's snapshot is there, a client reconnecting with
# Last-Event-ID (as EventSource does) gets the rest with no gap and no duplicate, the held
# item is fetched again, and the stream reaches end.
source "$(dirname "$0")/lib.sh"
start_origin
export THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true
start_thumbd --db "$WORK/cache.sqlite"

cat > "$WORK/sse.py" <<'PY'
"""sse.py BASE PATH LAST_ID STOP: reads an event stream; prints `id type index` per event.
STOP: "done=N" stops after N done events, "end" after end."""
import http.client, json, sys, urllib.parse
base, path, last, stop = sys.argv[1:5]
url = urllib.parse.urlsplit(base)
connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
connection.request("GET", path, headers={"Last-Event-ID": last} if last != "-" else {})
response = connection.getresponse()
assert response.status == 200, response.status
event, ident, done = None, None, 0
for raw in response:
    line = raw.decode().rstrip("\n")
    if line.startswith("id:"): ident = line[3:].strip()
    elif line.startswith("event:"): event = line[6:].strip()
    elif line.startswith("data:") and event != "progress":
        index = json.loads(line[5:]).get("index", "-")
        print(ident, event, index, flush=True)
        done += event == "done"
        if stop == "end" and event == "end": break
        if stop.startswith("done=") and done == int(stop[5:]): break
PY

items=$(python3 -c 'import json, sys; o = sys.argv[1]; print(json.dumps({"urls": [o + "/img/crash%d.jpg" % i for i in range(4)] + [o + "/gate/crash"]}))' "$ORIGIN")
created=$(curl -sf -X POST -H 'Content-Type: application/json' --data "$items" "$THUMBD/batches")
id=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["id"])' "$created")
python3 "$WORK/sse.py" "$THUMBD" "/batches/$id/events" - done=4 > "$WORK/before"
last=$(tail -1 "$WORK/before" | cut -d' ' -f1)
sleep 0.2  # journal writes are queued, not awaited by the events: one lost to the kill would only make its item again
kill -KILL "$THUMBD_PID"
wait "$THUMBD_PID" 2>/dev/null || true

start_thumbd --db "$WORK/cache.sqlite"
snapshot=$(curl -sf "$THUMBD/batches/$id") || fail "no batch $id after the restart"
python3 -c 'import json, sys; s = json.loads(sys.argv[1]); assert s["counts"]["done"] == 4 and s["state"] == "running", s["counts"]' "$snapshot" \
  || fail "the snapshot after the restart is wrong: $snapshot"
curl -sf "$ORIGIN/__release/crash" > /dev/null
python3 "$WORK/sse.py" "$THUMBD" "/batches/$id/events" "$last" end > "$WORK/after"
python3 - "$WORK/before" "$WORK/after" "$last" <<'PY' || fail "the resumed stream is wrong: $(cat "$WORK/after" | tr '\n' ';')"
import sys
before = [line.split() for line in open(sys.argv[1])]
after = [line.split() for line in open(sys.argv[2])]
last = int(sys.argv[3])
assert all(int(i) > last for i, _, _ in after), "an id at or below Last-Event-ID"
assert [i for _, e, i in after if e == "done"] == ["4"], "done after the restart: %s" % after
assert after[-1][1] == "end", "no end"
assert sorted(i for _, e, i in before if e == "done") == ["0", "1", "2", "3"]
PY
requests=$(curl -sf "$ORIGIN/__stats" | python3 -c 'import json, sys; r = json.load(sys.stdin)["requests"]; print(r.get("/gate/crash", 0), r.get("/img/crash0.jpg", 0))')
[ "$requests" = "2 1" ] || fail "origin requests (held, quick) = $requests, expected 2 1"
echo "   killed after $(wc -l < "$WORK/before") events (id $last); after the restart: $(tr '\n' ';' < "$WORK/after")"
