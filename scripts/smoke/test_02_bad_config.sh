#!/usr/bin/env bash
# A malformed setting stops start-up with a message naming the key, and a non-zero exit.
source "$(dirname "$0")/lib.sh"
if THUMBD_SERVER_THREADS=lots "$SMOKE_THUMBD" serve --listen 127.0.0.1:0 --db "$WORK/c.sqlite" 2> "$WORK/err"; then
  fail "started with THUMBD_SERVER_THREADS=lots"
fi
grep -q 'server.threads' "$WORK/err" || fail "message does not name the key: $(cat "$WORK/err")"
