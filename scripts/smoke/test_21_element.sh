#!/usr/bin/env bash
# <thumbd-img> and openBatch on a page of another origin, in headless Chromium over the
# DevTools protocol (scripts/elementtest.py): the first screen first, load and error, a
# re-render that asks nothing twice, scrolling that cancels and asks again, typed events and
# an AbortSignal, signed and preset-only setups.
source "$(dirname "$0")/lib.sh"
command -v chromium >/dev/null || fail "chromium is not installed (scripts/test installs it)"
start_origin
python3 "$ROOT/scripts/elementtest.py" "$SMOKE_THUMBD" "$ORIGIN" "$WORK"
echo "   ok"
