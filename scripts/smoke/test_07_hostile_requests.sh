#!/usr/bin/env bash
# 500+ hostile requests (scripts/hostile_requests.py) against the real binary: each gets a
# 4xx or a close within 2 s, never a 5xx, a hang or a crash; the daemon stays up and healthy.
source "$(dirname "$0")/lib.sh"
# A request whose body (or request line) never completes can only end at a deadline (20 s
# and 60 s by default, like any server's header and body timeouts): 1 s here, so that every
# case ends within 2 s.
THUMBD_SERVER_REQUEST_TIMEOUT_SECONDS=1 THUMBD_SERVER_IDLE_TIMEOUT_SECONDS=1 start_thumbd --db "$WORK/cache.sqlite"
port="${THUMBD##*:}"
python3 "$ROOT/scripts/hostile_requests.py" "$port" || fail "hostile requests"
kill -0 "$THUMBD_PID" || fail "thumbd died"
kill -TERM "$THUMBD_PID"; wait "$THUMBD_PID" || fail "thumbd did not exit 0 after the hostile requests"
