#!/usr/bin/env bash
# thumbd warm / stats / purge against a running daemon: the progress bar, --json, the exit
# status and the list of failures, the counters, and purging one URL or everything.
source "$(dirname "$0")/lib.sh"
start_origin
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true start_thumbd --db "$WORK/cache.sqlite"

cat > "$WORK/urls" <<URLS
# three images and one missing
$ORIGIN/img/w1.jpg
$ORIGIN/png/w2.png

$ORIGIN/slow?size=40000&chunk=10000&every=50
$ORIGIN/status/404
URLS
if "$SMOKE_THUMBD" warm "$WORK/urls" --server "$THUMBD" > "$WORK/out" 2> "$WORK/err"; then
  fail "warm exited 0 although an item failed"
fi
grep -q '4/4 done 3 failed 1' "$WORK/err" || fail "no final progress line: $(cat "$WORK/err")"
grep -q '404 upstream_not_found .*status/404' "$WORK/err" || fail "failure not listed: $(cat "$WORK/err")"

"$SMOKE_THUMBD" warm - --json --server "$THUMBD" < "$WORK/urls" > "$WORK/events" 2>/dev/null || true
[ "$(grep -c '"event":"done"' "$WORK/events")" = 3 ] || fail "expected 3 done JSON lines: $(cat "$WORK/events")"
grep -q '"cache":"hit"' "$WORK/events" || fail "second warm was not served from the cache"
tail -1 "$WORK/events" | grep -q '"event":"end"' || fail "last JSON line is not end"

"$SMOKE_THUMBD" stats --server "$THUMBD" > "$WORK/stats"
grep -q '^objects *4$' "$WORK/stats" || fail "stats: $(cat "$WORK/stats")"   # 3 images + the remembered 404
grep -q 'hit ratio' "$WORK/stats" || fail "stats has no hit ratio"
grep -q '^thumbnails *0 made' "$WORK/stats" || fail "stats has no thumbnails: $(cat "$WORK/stats")"

# purge prints a line for a person (as stats does), JSON with --json; THUMBD_URL names the daemon.
THUMBD_URL="$THUMBD" "$SMOKE_THUMBD" purge "$ORIGIN/img/w1.jpg" > "$WORK/purged"
grep -q "^purged $ORIGIN/img/w1.jpg and its variants: 1 object removed$" "$WORK/purged" || fail "purge of one URL: $(cat "$WORK/purged")"
"$SMOKE_THUMBD" purge --all --json --server "$THUMBD" | grep -q '"purged":3' || fail "purge --all --json"
"$SMOKE_THUMBD" stats --json --server "$THUMBD" | grep -q '"objects":0' || fail "cache not empty after purge --all"
if "$SMOKE_THUMBD" purge --server "$THUMBD" 2>/dev/null; then fail "purge without URL or --all accepted"; fi

# warm with thumbnail parameters makes the variants: done says PNG and src names the size.
echo "$ORIGIN/img/w1.jpg" | "$SMOKE_THUMBD" warm - --json --width 64 --height 64 --format png --server "$THUMBD" \
  > "$WORK/thumbs" 2>/dev/null || fail "warm with thumbnail parameters failed: $(cat "$WORK/thumbs")"
grep -Eq '"contentType":"image\\?/png"' "$WORK/thumbs" || fail "warm --format png: $(cat "$WORK/thumbs")"
grep -q 'w=64&h=64' "$WORK/thumbs" || fail "warm --width/--height: src does not name the variant: $(cat "$WORK/thumbs")"
