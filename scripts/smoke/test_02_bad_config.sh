#!/usr/bin/env bash
# What an operator sees when the daemon cannot start: a setting that is wrong (malformed,
# or a key / THUMBD_ variable no setting has) exits 78 naming the key and the nearest name;
# a port already taken exits 1 naming the address; neither prints the usage text, nor
# libmicrohttpd's "port 0". `--version` names the release and the C libraries.
source "$(dirname "$0")/lib.sh"
expect_exit() {  # expect_exit STATUS PATTERN COMMAND...: runs it, checks its status and stderr
  local want="$1" pattern="$2"; shift 2
  local status=0
  "$@" > "$WORK/out" 2> "$WORK/err" || status=$?
  [ "$status" = "$want" ] || fail "$*: exit $status, not $want: $(cat "$WORK/err")"
  grep -q -- "$pattern" "$WORK/err" || fail "$*: stderr lacks '$pattern': $(cat "$WORK/err")"
  if grep -qi 'usage' "$WORK/err"; then fail "$*: printed the usage text: $(cat "$WORK/err")"; fi
}
expect_exit 78 'server.threads' env THUMBD_SERVER_THREADS=lots "$SMOKE_THUMBD" serve --listen 127.0.0.1:0 --db "$WORK/c.sqlite"
expect_exit 78 'did you mean THUMBD_UPSTREAM_MAX_PER_HOST' \
  env THUMBD_UPSTREAM_MAX_PER_HOTS=2 "$SMOKE_THUMBD" serve --listen 127.0.0.1:0 --db "$WORK/c.sqlite"
printf 'upstream:\n  maxPerHots: 2\n' > "$WORK/typo.yaml"
expect_exit 78 'did you mean upstream.maxPerHost' "$SMOKE_THUMBD" serve --config "$WORK/typo.yaml" --listen 127.0.0.1:0 --db "$WORK/c.sqlite"

# A port that is taken: by a listener this test starts.
python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)' > "$WORK/port" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.05; done
port="$(cat "$WORK/port")"
expect_exit 1 "cannot listen on 127.0.0.1:$port" "$SMOKE_THUMBD" serve --listen "127.0.0.1:$port" --db "$WORK/c.sqlite"
if grep -q 'port 0' "$WORK/err"; then fail "libmicrohttpd's misleading notice: $(cat "$WORK/err")"; fi
# The failed start stopped what it had started (the lane's 97 resize threads among them).
THUMBD_THUMBNAILS_WORKERS=97 expect_exit 1 "cannot listen on 127.0.0.1:$port" "$SMOKE_THUMBD" serve --listen "127.0.0.1:$port" --db "$WORK/c.sqlite"
grep -q 'threads.left=0' "$WORK/err" || fail "a failed start left threads: $(grep -o 'threads.left=[^ ]*' "$WORK/err" || cat "$WORK/err")"

# A wrong command line is still a usage error (64, with the usage text).
status=0; "$SMOKE_THUMBD" serve --log-level loud 2> "$WORK/err" || status=$?
[ "$status" = 64 ] || fail "--log-level loud: exit $status"

"$SMOKE_THUMBD" --version > "$WORK/version"
grep -q '^thumbd [0-9]' "$WORK/version" || fail "--version: $(cat "$WORK/version")"
grep -q '^libvips 8' "$WORK/version" || fail "--version without libvips: $(cat "$WORK/version")"

# One daemon per cache file: the second exits 1 within a second, naming the file and the holder.
start_thumbd --db "$WORK/shared.sqlite"
started=$(date +%s%N)
expect_exit 1 "pid $THUMBD_PID" "$SMOKE_THUMBD" serve --listen 127.0.0.1:0 --db "$WORK/shared.sqlite"
grep -q "$WORK/shared.sqlite" "$WORK/err" || fail "the refusal does not name the file: $(cat "$WORK/err")"
[ $(( ($(date +%s%N) - started) / 1000000 )) -lt 1000 ] || fail "the second daemon took over a second to give up"

# A damaged cache file is moved aside and the daemon starts empty, with a warning.
head -c 20000 /dev/urandom > "$WORK/damaged.sqlite"
cp "$WORK/damaged.sqlite" "$WORK/damaged.copy"
start_thumbd --db "$WORK/damaged.sqlite"
grep -q 'store.damaged' "$WORK/thumbd.err" || fail "no warning: $(cat "$WORK/thumbd.err")"
cmp -s "$WORK/damaged.copy" "$(ls "$WORK"/damaged.sqlite.damaged-* | head -1)" || fail "the damaged file was not kept"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$THUMBD/healthz")" = 200 ] || fail "not healthy after starting over"

# A cache file that cannot be made: the path and the setting are named.
touch "$WORK/a-file"
expect_exit 1 'store.path, --db' "$SMOKE_THUMBD" serve --listen 127.0.0.1:0 --db "$WORK/a-file/cache.sqlite"
