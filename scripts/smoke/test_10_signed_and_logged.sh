#!/usr/bin/env bash
# A daemon with signing keys and the access log: `thumbd sign` prints a link that works,
# an unsigned one is 403, `thumbd warm --sign-key` signs its items; the access log has one
# line per request with its X-Request-Id (so does a failed fetch's log line) and never the
# signature; /metrics answers.
source "$(dirname "$0")/lib.sh"
start_origin
KEY_OLD="smoke-key-0123456789-old"
KEY_NEW="smoke-key-0123456789-new"
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true THUMBD_SIGNING_KEYS="$KEY_NEW,$KEY_OLD" THUMBD_LOG_ACCESS=true \
  start_thumbd --db "$WORK/cache.sqlite"

link="$("$SMOKE_THUMBD" sign "$ORIGIN/img/s1.jpg" --width 48 --sign-key "$KEY_OLD" --server "$THUMBD")"
case "$link" in "$THUMBD/thumb?url="*"&w=48&sig="*) ;; *) fail "sign printed: $link" ;; esac
sig="${link##*sig=}"
status="$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Request-Id: smoke-req-1' "$link")"
[ "$status" = 200 ] || fail "signed link: $status"
status="$(curl -s -o /dev/null -w '%{http_code}' "${link%%&sig=*}")"
[ "$status" = 403 ] || fail "unsigned link: $status"

echo "$ORIGIN/img/s2.jpg" | THUMBD_SIGNING_KEY="$KEY_NEW" "$SMOKE_THUMBD" warm - --width 48 --server "$THUMBD" \
  2> "$WORK/warm" || fail "signed warm failed: $(cat "$WORK/warm")"
if echo "$ORIGIN/img/s3.jpg" | "$SMOKE_THUMBD" warm - --sign-key "not-the-right-key-at-all" --server "$THUMBD" 2> "$WORK/warm2"; then
  fail "warm with a wrong key succeeded"
fi
grep -q 'bad_signature' "$WORK/warm2" || fail "wrong-key warm: $(cat "$WORK/warm2")"

# A request whose fetch fails: the daemon's own log line about it carries the request's id.
link503="$("$SMOKE_THUMBD" sign "$ORIGIN/status/503" --sign-key "$KEY_NEW" --server "$THUMBD")"
curl -s -o /dev/null -H 'X-Request-Id: smoke-req-503' "$link503"
grep 'fetch.failed' "$WORK/thumbd.err" | grep -q 'request.id=smoke-req-503' \
  || fail "fetch.failed without the request id: $(grep fetch.failed "$WORK/thumbd.err")"

# A request is counted once its answer has gone out (libmicrohttpd's completion callback),
# which may be a moment after the client read it: asked again for up to 2 s. The page is read
# whole before grep looks at it: `curl | grep -q` under pipefail fails whenever grep has
# matched and left before curl wrote its last piece (curl then dies of SIGPIPE).
counted=""
for _ in $(seq 40); do
  metrics="$(curl -s "$THUMBD/metrics")"
  if grep -q '^thumbd_http_requests_total{route="/thumb",status="200"} 1' <<< "$metrics"; then counted=yes; break; fi
  sleep 0.05
done
[ -n "$counted" ] || fail "metrics: $(grep requests_total <<< "$metrics")"

grep -q 'request.id=smoke-req-1' "$WORK/thumbd.err" || fail "no access line with the request id: $(cat "$WORK/thumbd.err")"
grep 'request.id=smoke-req-1' "$WORK/thumbd.err" | grep -q 'http.status=200' || fail "access line without status"
if grep -q -- "$sig" "$WORK/thumbd.err"; then fail "the signature was logged"; fi
[ "$(grep -c 'thumbd.access' "$WORK/thumbd.err")" -ge 4 ] || fail "expected an access line per request"
