#!/usr/bin/env bash
# Reload without restart, as nginx's: a signing key rotated and a host name allowed by SIGHUP
# while a signed link is in use (the old link refused, the new one served, the cache and the process kept); an
# upstream limit changed and then restored, in force at once; a change that needs a restart is named; a file that does not load keeps the running
# settings; SIGUSR1 reopens the log alone; `thumbd check` and `thumbd health` answer 0, 78
# and 1 as documented; Kubernetes's THUMBD_* variables are ignored and named at start.
source "$(dirname "$0")/lib.sh"
start_origin
KEY_A="reload-key-0123456789-aaa"
KEY_B="reload-key-0123456789-bbb"
config="$WORK/thumbd.yaml"
printf 'upstream:\n  allowPrivateNetworks: true\nsigning:\n  keys: [%s]\nlog:\n  file: %s\n' "$KEY_A" "$WORK/log" > "$config"
"$SMOKE_THUMBD" check --config "$config" > /dev/null || fail "check refused a good file"
THUMBD_SERVICE_HOST=10.0.0.11 THUMBD_PORT=tcp://10.0.0.11:8080 THUMBD_PORT_8080_TCP_ADDR=10.0.0.11 \
  start_thumbd --config "$config" --db "$WORK/cache.sqlite"
grep 'config.ignored' "$WORK/log" | grep -q 'variables=THUMBD_PORT,THUMBD_PORT_8080_TCP_ADDR,THUMBD_SERVICE_HOST' ||
  fail "the Kubernetes variables are not named: $(grep config "$WORK/log")"
old_link="$("$SMOKE_THUMBD" sign "$ORIGIN/img/r1.jpg" --width 32 --sign-key "$KEY_A" --server "$THUMBD")"
new_link="$("$SMOKE_THUMBD" sign "$ORIGIN/img/r1.jpg" --width 32 --sign-key "$KEY_B" --server "$THUMBD")"
other_link="$("$SMOKE_THUMBD" sign "$ORIGIN/img/r2.jpg" --width 32 --sign-key "$KEY_B" --server "$THUMBD")"
code() { curl -s -o /dev/null -w '%{http_code}' "$1"; }
[ "$(code "$old_link")" = 200 ] || fail "the link signed with the running key: $(code "$old_link")"
[ "$(code "$new_link")" = 403 ] || fail "the link signed with a key not yet loaded"

named() { curl -s -o /dev/null -w '%{http_code}' -H 'Host: thumbd.internal' "$THUMBD/healthz"; }
[ "$(named)" = 421 ] || fail "a name not allowed yet: $(named)"
# Rotate: B signs, A still verifies (both listed); a name allowed; a change that needs a restart.
printf 'server:\n  allowedHosts: [thumbd.internal]\nupstream:\n  allowPrivateNetworks: true\n  threads: 1\n  maxObjectBytes: 2048\nsigning:\n  keys: [%s, %s]\nlog:\n  file: %s\n  level: debug\n' \
  "$KEY_B" "$KEY_A" "$WORK/log" > "$config"
kill -HUP "$THUMBD_PID"
for _ in $(seq 100); do grep -q 'config.reloaded' "$WORK/log" && break; sleep 0.05; done
grep 'config.reloaded' "$WORK/log" | grep -q 'applied=log.level,server.allowedHosts,signing.keys,upstream.maxObjectBytes' ||
  fail "reload: $(grep config.re "$WORK/log")"
[ "$(named)" = 200 ] || fail "the name allowed by the reload: $(named)"
grep 'config.reloaded' "$WORK/log" | grep -q 'restart.needed=upstream.threads' || fail "reload did not name the restart"
[ "$(code "$other_link")" = 502 ] || fail "upstream.maxObjectBytes lowered by the reload: $(code "$other_link")"
[ "$(code "$new_link")" = 200 ] || fail "the new key after the reload: $(code "$new_link")"
[ "$(code "$old_link")" = 200 ] || fail "the old key, still listed"
grep -qi 'X-Thumbd-Cache: hit' <<< "$(curl -sI "$new_link")" || fail "the cache was not kept"
# Retire A.
printf 'upstream:\n  allowPrivateNetworks: true\nsigning:\n  keys: [%s]\nlog:\n  file: %s\n' "$KEY_B" "$WORK/log" > "$config"
kill -HUP "$THUMBD_PID"
for _ in $(seq 100); do [ "$(grep -c 'config.reloaded' "$WORK/log")" -ge 2 ] && break; sleep 0.05; done
[ "$(code "$old_link")" = 403 ] || fail "the retired key still verifies"
[ "$(code "$other_link")" = 200 ] || fail "upstream.maxObjectBytes restored by the reload: $(code "$other_link")"
# A file that does not load: refused, the running settings stay.
printf 'signing:\n  keys: [short]\n' > "$config"
"$SMOKE_THUMBD" check --config "$config" > /dev/null 2>&1 && fail "check accepted a key of 5 characters"
status=0; "$SMOKE_THUMBD" check --config "$config" > /dev/null 2>&1 || status=$?
[ "$status" = 78 ] || fail "check's status for a wrong setting: $status"
kill -HUP "$THUMBD_PID"
for _ in $(seq 100); do grep -q 'config.reload refused' "$WORK/log" && break; sleep 0.05; done
grep 'config.reload refused' "$WORK/log" | grep -q 'signing.keys' || fail "a bad file: $(tail -3 "$WORK/log")"
[ "$(code "$new_link")" = 200 ] || fail "the running key after a refused reload"
# SIGUSR1: the log reopened (moved away by logrotate), nothing reloaded.
mv "$WORK/log" "$WORK/log.1"
kill -USR1 "$THUMBD_PID"
for _ in $(seq 100); do [ -s "$WORK/log" ] && break; sleep 0.05; done
grep -q 'log.reopened' "$WORK/log" || fail "SIGUSR1 did not reopen the log"
grep -q 'config.re' "$WORK/log" && fail "SIGUSR1 reloaded the settings"
# health follows server.listen.
: > "$WORK/empty.yaml"
port="${THUMBD##*:}"
THUMBD_SERVER_LISTEN="0.0.0.0:$port" "$SMOKE_THUMBD" health --config "$WORK/empty.yaml" > "$WORK/health" 2>&1 ||
  fail "health: $(cat "$WORK/health")"
status=0; THUMBD_SERVER_LISTEN="127.0.0.1:1" "$SMOKE_THUMBD" health --config "$WORK/empty.yaml" > /dev/null 2>&1 || status=$?
[ "$status" = 1 ] || fail "health of nothing listening: $status"
echo "   rotated a key by SIGHUP, named a restart, refused a bad file, reopened by SIGUSR1, check and health: ok"
