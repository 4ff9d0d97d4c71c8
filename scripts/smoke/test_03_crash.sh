#!/usr/bin/env bash
# kill -9 in the middle of many stores: after a restart the database is intact and every
# object served as a hit has exactly the origin's bytes (no half-written blob is visible).
source "$(dirname "$0")/lib.sh"
start_origin
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true THUMBD_UPSTREAM_MAX_PER_HOST=4 start_thumbd --db "$WORK/cache.sqlite"

python3 - "$ORIGIN" > "$WORK/paths" <<'PY'
import sys, urllib.parse
for i in range(150):
    print(urllib.parse.quote("%s/slow?size=300000&chunk=65536&every=20&n=%d" % (sys.argv[1], i), safe=""))
PY
clients=()
while read -r encoded; do
  curl -s -o /dev/null "$THUMBD/thumb?url=$encoded" &
  clients+=($!)
done < "$WORK/paths"

count() { python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM objects").fetchone()[0])' "$WORK/cache.sqlite" 2>/dev/null || echo 0; }
for _ in $(seq 300); do [ "$(count)" -ge 10 ] && break; sleep 0.05; done
kill -KILL "$THUMBD_PID"
for pid in "${clients[@]}"; do wait "$pid" 2>/dev/null || true; done

python3 - "$WORK/cache.sqlite" <<'PY' || fail "the database did not survive the kill"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
assert db.execute("SELECT count(*) FROM objects WHERE size != length(body)").fetchone()[0] == 0
n = db.execute("SELECT count(*) FROM objects").fetchone()[0]
assert 0 < n < 150, "expected a partial cache after the kill, found %d objects" % n
print("   %d of 150 objects were committed before the kill" % n)
PY

THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true start_thumbd --db "$WORK/cache.sqlite"
hits=0
while read -r encoded; do
  curl -fsS -o "$WORK/got" -D "$WORK/h" "$THUMBD/thumb?url=$encoded"
  if grep -qi '^x-thumbd-cache: hit' "$WORK/h"; then
    hits=$((hits + 1))
    curl -fsS -o "$WORK/want" -H 'X-Test-Direct: 1' "$(python3 -c 'import sys,urllib.parse; print(urllib.parse.unquote(sys.argv[1]))' "$encoded")"
    cmp -s "$WORK/got" "$WORK/want" || fail "a cached object differs from the origin after the crash"
  fi
done < "$WORK/paths"
[ "$hits" -gt 0 ] || fail "no object survived as a hit"
echo "   $hits hits after the restart, all byte-identical to the origin"
