#!/usr/bin/env bash
# Every redirect hop is checked before its connection (destinations are checked before connecting). Needs an origin
# on a public address: the test runs in its own network namespace (loopback only, nothing
# leaves the machine), where 93.184.216.34 is added to lo. The origin there redirects to
# loopback in every spelling; a bare listener on 127.0.0.1 proves nothing connected.
if [ -z "${SMOKE_IN_NETNS:-}" ]; then
  if ! unshare -n true 2>/dev/null; then
    echo "   skipped: this machine cannot make a network namespace (unshare -n needs root)"
    exit 0
  fi
  exec unshare -n env SMOKE_IN_NETNS=1 bash "$0" "$@"
fi
source "$(dirname "$0")/lib.sh"
ip link set lo up
ip addr add 93.184.216.34/32 dev lo
TESTORIGIN_HOST=93.184.216.34 start_origin
ORIGIN="${ORIGIN/127.0.0.1/93.184.216.34}"
start_thumbd --db "$WORK/cache.sqlite"   # shipped defaults: private networks refused

python3 - "$THUMBD" "$ORIGIN" <<'PY' || fail "redirect hops"
import json, socket, sys, urllib.error, urllib.parse, urllib.request
thumbd, origin = sys.argv[1:3]
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(16)
listener.setblocking(False)
port = listener.getsockname()[1]

def get(url):
    try:
        with urllib.request.urlopen(thumbd + "/thumb?url=" + urllib.parse.quote(url, safe=""), timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()

status, _ = get(origin + "/img/public.jpg")
assert status == 200, "the public-address origin itself must be allowed: %d" % status
for target in ["http://127.0.0.1:%d/x.jpg", "http://localhost:%d/x.jpg", "http://127.1:%d/x.jpg",
               "http://2130706433:%d/x.jpg", "http://[::ffff:127.0.0.1]:%d/x.jpg", "https://localhost:%d/x.jpg",
               "http://0:%d/x.jpg"]:
    hop = target % port
    status, body = get(origin + "/hostile/redirect-to?url=" + urllib.parse.quote(hop, safe=""))
    assert status == 403 and json.loads(body)["error"] == "destination_not_allowed", (hop, status, body)
try:
    listener.accept()
    raise AssertionError("thumbd connected to the loopback listener during a redirect")
except BlockingIOError:
    pass
print("   7 redirect hops to loopback refused before connecting; the origin itself served")
PY

# A proxy named in the environment is not used (only upstream.proxy is): through it, the
# policy would check the proxy's address, never the origin's. The variables name the
# loopback listener, which must see no connection.
exec 3< <(python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16); s.settimeout(30)
print(s.getsockname()[1], flush=True)
try:
    s.accept(); print("connected", flush=True)
except socket.timeout:
    pass
')
PIDS+=($!)
read -r PROXY_PORT <&3
kill "$THUMBD_PID"; wait "$THUMBD_PID" 2>/dev/null || true
http_proxy="http://127.0.0.1:$PROXY_PORT" HTTP_PROXY="http://127.0.0.1:$PROXY_PORT" \
  ALL_PROXY="http://127.0.0.1:$PROXY_PORT" start_thumbd --db "$WORK/cache2.sqlite"
status=$(curl -s -o /dev/null -w '%{http_code}' "$THUMBD/thumb?url=$(urlencode "$ORIGIN/img/env-proxy.jpg")")
[ "$status" = 200 ] || fail "with http_proxy in the environment: $status, want 200 (fetched directly)"
kill "$THUMBD_PID"; wait "$THUMBD_PID" 2>/dev/null || true
if timeout 1 grep -q connected <&3; then fail "thumbd connected to the proxy named in its environment"; fi
echo "   a proxy named in the environment is ignored: fetched directly, nothing connected to it"
