#!/usr/bin/env bash
# kill -9 at 20 random moments under mixed write load (stores of slow and fast objects,
# eviction active, purges): after every kill the database passes integrity_check and holds
# no half-written blob; after the last restart every object served as a hit has exactly the
# origin's bytes.
source "$(dirname "$0")/lib.sh"
start_origin
KILLS="${SMOKE_CRASH_KILLS:-20}"
# 3 MB of cache for ~6 MB of objects: eviction runs during the load.
export THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true THUMBD_UPSTREAM_MAX_PER_HOST=16 THUMBD_STORE_MAX_BYTES=3000000

python3 - "$ORIGIN" > "$WORK/paths" <<'PY'
import sys, urllib.parse
for i in range(60):
    print(urllib.parse.quote("%s/slow?size=100000&chunk=32768&every=20&n=%d" % (sys.argv[1], i), safe=""))
    print(urllib.parse.quote("%s/img/fast-%d.jpg?size=%d" % (sys.argv[1], i, 20000 + 1000 * i), safe=""))
PY

check() {
  python3 - "$WORK/cache.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "integrity_check failed"
assert db.execute("SELECT count(*) FROM objects WHERE size != length(body)").fetchone()[0] == 0, "a half-written body"
print(db.execute("SELECT count(*) FROM objects").fetchone()[0])
PY
}

passed=0
for round in $(seq "$KILLS"); do
  start_thumbd --db "$WORK/cache.sqlite"
  clients=()
  for encoded in $(shuf -n 40 "$WORK/paths"); do
    curl -s -o /dev/null --max-time 20 "$THUMBD/thumb?url=$encoded" &
    clients+=($!)
  done
  curl -s -o /dev/null -X DELETE "$THUMBD/cache?url=$(shuf -n 1 "$WORK/paths")" &
  clients+=($!)
  sleep "$(python3 -c 'import random; print(round(random.uniform(0.05, 1.5), 2))')"
  kill -KILL "$THUMBD_PID"
  wait "$THUMBD_PID" 2>/dev/null || true
  for pid in "${clients[@]}"; do wait "$pid" 2>/dev/null || true; done
  objects="$(check)" || fail "round $round: the database did not survive kill -9"
  passed=$((passed + 1))
  echo "   kill $round: integrity ok, $objects objects"
done
echo "   $passed of $KILLS kills left an intact database"

start_thumbd --db "$WORK/cache.sqlite"
hits=0
while read -r encoded; do
  curl -fsS -o "$WORK/got" -D "$WORK/h" "$THUMBD/thumb?url=$encoded"
  if grep -qi '^x-thumbd-cache: hit' "$WORK/h"; then
    hits=$((hits + 1))
    curl -fsS -o "$WORK/want" -H 'X-Test-Direct: 1' "$(python3 -c 'import sys,urllib.parse; print(urllib.parse.unquote(sys.argv[1]))' "$encoded")"
    cmp -s "$WORK/got" "$WORK/want" || fail "a cached object differs from the origin after the crashes"
  fi
done < "$WORK/paths"
[ "$hits" -gt 0 ] || fail "no object survived as a hit"
echo "   $hits hits after the last restart, all byte-identical to the origin"
