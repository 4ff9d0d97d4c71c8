#!/usr/bin/env bash
# A full disk, on a 4 MB tmpfs this test mounts: while writes fail,
# thumbd keeps serving, says "degraded" in /healthz, keeps its counters true and can still
# purge; once space returns it stores again by itself, without a restart.
source "$(dirname "$0")/lib.sh"
DISK="$WORK/disk"
mkdir -p "$DISK"
if ! mount -t tmpfs -o size=4m thumbd-disk-full "$DISK" 2>/dev/null; then
  echo "   skipped: this machine cannot mount a small filesystem (needs root and mount rights)"
  exit 0
fi
trap 'stop_started; umount -l "$DISK" 2>/dev/null || true; rm -rf "$WORK"' EXIT
start_origin
head -c 1500000 /dev/zero > "$DISK/filler"  # freed later: "space returns"
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true THUMBD_STORE_MAX_BYTES=104857600 start_thumbd --db "$DISK/cache.sqlite"

python3 - "$THUMBD" "$ORIGIN" "$DISK" <<'PY' || fail "disk-full behaviour"
import json, os, sqlite3, sys, time, urllib.error, urllib.parse, urllib.request
thumbd, origin, disk = sys.argv[1:4]

def get(path, method="GET"):
    request = urllib.request.Request(thumbd + path, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()

def thumb(name):
    return "/thumb?url=" + urllib.parse.quote("%s/img/%s.jpg?size=200000" % (origin, name), safe="")

def stored():
    db = sqlite3.connect("file:%s/cache.sqlite?mode=ro" % disk, uri=True)
    try:
        return db.execute("SELECT count(*), coalesce(sum(size), 0) FROM objects").fetchone()
    finally:
        db.close()

def settled_stats():
    """/stats once no fetch is in flight: a fetch's flight ends when its store write has
    committed or failed (a request can be answered, even as a hit, before that)."""
    for _ in range(100):
        stats = json.loads(get("/stats")[2])
        if stats["fetchesInFlight"] == 0:
            return stats
        time.sleep(0.05)
    raise AssertionError("fetches still in flight after 5 s: %s" % stats)

# Fill the disk: each image is 200 KB; the 4 MB disk (1.5 MB taken) fills after ~10.
full_at = None
for i in range(40):
    status, headers, body = get(thumb("fill-%d" % i))
    assert status == 200 and len(body) == 200000, (i, status)  # served even when not stored
    health_status, _, health_body = get("/healthz")
    health = json.loads(health_body)
    if health["status"] == "degraded":
        full_at = i
        break
assert full_at is not None, "the disk never filled"
# This reading, not a second one: a small write (the access times' flush, every second) can
# still find room in pages SQLite already has, and a success clears "degraded" until the
# next failure.
print("   disk full after %d images: /healthz %s" % (full_at, health))
assert health_status == 200 and "disk is full" in health["reason"], health

# Counters stay true across failed commits.
for i in range(full_at + 1, full_at + 6):
    assert get(thumb("fill-%d" % i))[0] == 200
stats = settled_stats()
objects, size = stored()
assert (stats["objects"], stats["bytes"]) == (objects, size), (stats, objects, size)
assert stats["storeWritable"] is False, stats
print("   while full: stats say %d objects / %d bytes, as the database does" % (objects, size))

# A purge works while full (it gives up the 1 MB reserve thumbd keeps for it).
status, _, body = get("/cache?url=" + urllib.parse.quote("%s/img/fill-0.jpg?size=200000" % origin, safe=""), "DELETE")
assert status == 200 and json.loads(body)["purged"] == 1, (status, body)
stats = settled_stats()
objects, size = stored()
assert (stats["objects"], stats["bytes"]) == (objects, size), (stats, objects, size)
print("   purge while full: %d %s" % (status, body.decode().strip()))

# Space returns: storing resumes without a restart.
os.remove(os.path.join(disk, "filler"))
recovered = False
for i in range(100, 110):
    assert get(thumb("after-%d" % i))[0] == 200
    status, headers, _ = get(thumb("after-%d" % i))
    # A hit may come from the finished flight while its write is still pending: it is the
    # settled counters and the database below that show the object was stored.
    if headers.get("X-Thumbd-Cache") == "hit" and json.loads(get("/healthz")[2])["status"] == "ok":
        recovered = True
        break
assert recovered, "thumbd did not store again after space returned: %s" % get("/healthz")[2]
stats = settled_stats()
objects, size = stored()
assert (stats["objects"], stats["bytes"]) == (objects, size), (stats, objects, size)
assert stats["storeWritable"] is True
db = sqlite3.connect("file:%s/cache.sqlite?mode=ro" % disk, uri=True)
assert db.execute("SELECT count(*) FROM objects WHERE url LIKE '%/img/after-%'").fetchone()[0] >= 1, "nothing stored after space returned"
db.close()
assert objects >= 2, "only %d objects cached after recovery: the counters made it evict everything" % objects
status, _, body = get("/cache", "DELETE")
assert status == 200, (status, body)
print("   after space returned: stored again, %d objects before a full purge, which answered %s" % (objects, body.decode().strip()))
PY
kill -TERM "$THUMBD_PID"; wait "$THUMBD_PID" || fail "thumbd did not exit 0"
python3 -c 'import sqlite3,sys; assert sqlite3.connect(sys.argv[1]).execute("PRAGMA integrity_check").fetchone()[0] == "ok"' "$DISK/cache.sqlite" \
  || fail "integrity_check failed"
echo "   integrity_check ok"
