#!/usr/bin/env bash
# The real binary: settings from file + environment + flags, miss then hit with curl,
# a JSON 400, and a clean exit 0 on SIGTERM (no thread left behind) with the cache kept
# for the next start (by a copy of the binary under another name); an IPv6 listen address
# announced with its brackets.
source "$(dirname "$0")/lib.sh"
start_origin
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true start_thumbd --config "$ROOT/config/thumbd.yaml" --db "$WORK/cache.sqlite"

url="$THUMBD/thumb?url=$(urlencode "$ORIGIN/img/smoke.jpg")"
curl -fsS -o "$WORK/a.jpg" -D "$WORK/h1" "$url"
grep -qi '^x-thumbd-cache: miss' "$WORK/h1" || fail "first answer was not a miss"
curl -fsS -o "$WORK/b.jpg" -D "$WORK/h2" "$url"
grep -qi '^x-thumbd-cache: hit' "$WORK/h2" || fail "second answer was not a hit"
cmp -s "$WORK/a.jpg" "$WORK/b.jpg" || fail "hit bytes differ"

code=$(curl -s -o "$WORK/err.json" -w '%{http_code}' "$THUMBD/thumb?url=ftp%3A%2F%2Fx")
[ "$code" = 400 ] || fail "bad scheme gave $code"
grep -q '"error":"unsupported_scheme"' "$WORK/err.json" || fail "no JSON error: $(cat "$WORK/err.json")"

kill -TERM "$THUMBD_PID"
wait "$THUMBD_PID" || fail "thumbd exited with $? on SIGTERM"
# The stop is graceful and complete: every thread thumbd started has ended before it exits.
grep -q 'thumbd.stopped' "$WORK/thumbd.err" || fail "no graceful stop: $(tail -3 "$WORK/thumbd.err")"
grep -q 'threads.left=0 .*thumbd.exit' "$WORK/thumbd.err" || fail "threads left running: $(grep thumbd.exit "$WORK/thumbd.err")"

# Restarted from a copy installed under another name (its main thread carries that name).
cp "$SMOKE_THUMBD" "$WORK/thumbd-1.2"
SMOKE_THUMBD="$WORK/thumbd-1.2" THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true start_thumbd --db "$WORK/cache.sqlite"
url="$THUMBD/thumb?url=$(urlencode "$ORIGIN/img/smoke.jpg")"  # a new port
curl -fsS -o /dev/null -D "$WORK/h3" "$url"
grep -qi '^x-thumbd-cache: hit' "$WORK/h3" || fail "no hit after restart"
kill -INT "$THUMBD_PID"
wait "$THUMBD_PID" || fail "thumbd exited with $? on SIGINT"
grep -q 'threads.left=0 .*thumbd.exit' "$WORK/thumbd.err" || fail "renamed binary: $(grep thumbd.exit "$WORK/thumbd.err")"
# An IPv6 listen address: the announced URL keeps its brackets and answers.
if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
  start_thumbd --listen '[::1]:0' --db "$WORK/v6.sqlite"
  case "$THUMBD" in "http://[::1]:"*) ;; *) fail "IPv6: announced $THUMBD" ;; esac
  curl -fsS -o /dev/null "$THUMBD/healthz" || fail "IPv6: $THUMBD/healthz did not answer"
else
  echo "   (no IPv6 loopback here: the [::1] listen address is not tried)"
fi
