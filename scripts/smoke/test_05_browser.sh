#!/usr/bin/env bash
# The live grid page in real headless Chromium: load /, submit URLs of the test origin
# (five real images, one missing), let the page run until the batch ends, then check the
# DOM: five tiles show decoded images, one shows the failure placeholder. Screenshots
# (desktop and phone width) are saved under artifacts/ as test artifacts.
source "$(dirname "$0")/lib.sh"
command -v chromium >/dev/null || fail "chromium is not installed (scripts/test installs it)"
start_origin
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true start_thumbd --db "$WORK/cache.sqlite"

urls=$(python3 - "$ORIGIN" <<'PY'
import sys, urllib.parse
o = sys.argv[1]
lines = ["%s/real/tile-%d.png?delay=%d" % (o, i, 100 * i) for i in range(5)] + ["%s/status/404" % o]
print(urllib.parse.quote("\n".join(lines), safe=""))
PY
)
page="$THUMBD/?autostart=1&urls=$urls"
browser() { timeout 90 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$WORK/profile" \
  --virtual-time-budget=15000 "$@" 2>/dev/null; }

browser --dump-dom "$page" > "$WORK/dom.html" || fail "chromium failed"
grep -q 'data-batch="ended"' "$WORK/dom.html" || fail "the page never saw the end event"
done_tiles=$(grep -o 'data-state="done"[^>]*data-loaded="1"' "$WORK/dom.html" | wc -l)
failed_tiles=$(grep -o 'data-state="failed"' "$WORK/dom.html" | wc -l)
[ "$done_tiles" = 5 ] || fail "expected 5 tiles with decoded images, found $done_tiles"
[ "$failed_tiles" = 1 ] || fail "expected 1 failure tile, found $failed_tiles"
grep -q '404 · upstream_not_found' "$WORK/dom.html" || fail "the failure tile does not say what failed"
grep -q '5 done, 1 failed of 6' "$WORK/dom.html" || fail "the progress line is wrong"

mkdir -p "$ROOT/artifacts"
browser --screenshot="$ROOT/artifacts/grid-desktop.png" --window-size=1100,720 "$page" >/dev/null
browser --screenshot="$ROOT/artifacts/grid-phone.png" --window-size=390,844 "$page" >/dev/null
[ -s "$ROOT/artifacts/grid-desktop.png" ] && [ -s "$ROOT/artifacts/grid-phone.png" ] || fail "no screenshot"
echo "   screenshots: artifacts/grid-desktop.png, artifacts/grid-phone.png"
