#!/usr/bin/env bash
# The cache file over time, as an operator meets it: a backup taken while the daemon serves
# (restored, it serves the same objects), compact refused while the daemon runs and shrinking
# the file once it has stopped, and a file a newer thumbd wrote refused with exit 78 and left
# as it was.
source "$(dirname "$0")/lib.sh"
start_origin
DB="$WORK/cache.sqlite"
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true start_thumbd --db "$DB"
for i in $(seq 1 30); do
  curl -sf -o /dev/null "$THUMBD/thumb?url=$(urlencode "$ORIGIN/img/f$i.jpg?size=60000")" || fail "fetch $i"
done

# A backup while it serves; DEST must be new.
"$SMOKE_THUMBD" backup --db "$DB" "$WORK/backup.sqlite" > "$WORK/backup.out" || fail "backup: $(cat "$WORK/backup.out")"
grep -q "backed up $DB to $WORK/backup.sqlite" "$WORK/backup.out" || fail "backup said: $(cat "$WORK/backup.out")"
if "$SMOKE_THUMBD" backup --db "$DB" "$WORK/backup.sqlite" 2> "$WORK/again.err"; then fail "a backup over an existing file was written"; fi
grep -q "exists already" "$WORK/again.err" || fail "backup over a file said: $(cat "$WORK/again.err")"

# Compact is refused while the daemon holds the file, naming it.
if "$SMOKE_THUMBD" compact --db "$DB" 2> "$WORK/compact.err"; then fail "compact ran while the daemon runs"; fi
grep -q "used by another thumbd (pid $THUMBD_PID" "$WORK/compact.err" || fail "compact while running said: $(cat "$WORK/compact.err")"

"$SMOKE_THUMBD" purge --all --server "$THUMBD" > /dev/null
kill "$THUMBD_PID"; wait "$THUMBD_PID" || fail "the daemon did not stop cleanly"
PIDS=("${PIDS[@]/$THUMBD_PID}")
before=$(stat -c %s "$DB")
"$SMOKE_THUMBD" compact --db "$DB" > "$WORK/compact.out" || fail "compact: $(cat "$WORK/compact.out")"
after=$(stat -c %s "$DB")
[ "$after" -lt $((before / 4)) ] || fail "compact left $after bytes of $before"
grep -q "compacted $DB: $before bytes, now $after" "$WORK/compact.out" || fail "compact said: $(cat "$WORK/compact.out")"

# The backup restored: the daemon on it serves the objects from the cache, the origin not asked.
mv "$WORK/backup.sqlite" "$DB"; rm -f "$DB-wal" "$DB-shm"
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true start_thumbd --db "$DB"
curl -sf -D "$WORK/headers" -o /dev/null "$THUMBD/thumb?url=$(urlencode "$ORIGIN/img/f7.jpg?size=60000")" || fail "restored fetch"
grep -qi '^x-thumbd-cache: hit' "$WORK/headers" || fail "the restored cache did not answer: $(cat "$WORK/headers")"
kill "$THUMBD_PID"; wait "$THUMBD_PID" || fail "the daemon did not stop cleanly"
PIDS=("${PIDS[@]/$THUMBD_PID}")

# A file from a newer thumbd: exit 78, the reason named, the file untouched.
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA user_version = 1000"); c.commit()' "$DB"
sum=$(sha256sum "$DB" | cut -d' ' -f1)
status=0
"$SMOKE_THUMBD" serve --listen 127.0.0.1:0 --db "$DB" > "$WORK/newer.out" 2> "$WORK/newer.err" || status=$?
[ "$status" = 78 ] || fail "a newer file: exit $status (want 78): $(tail -3 "$WORK/newer.err")"
grep -q "invalid setting store.path: .*written by a newer thumbd (schema version 1000" "$WORK/newer.err" || fail "a newer file said: $(tail -3 "$WORK/newer.err")"
[ "$(sha256sum "$DB" | cut -d' ' -f1)" = "$sum" ] || fail "the newer file was changed"
ls "$WORK" | grep -q damaged && fail "the newer file was set aside as damaged"
echo "   backup while serving, compact $before -> $after bytes, a newer file refused with 78"
