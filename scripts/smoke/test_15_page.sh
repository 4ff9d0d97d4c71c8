#!/usr/bin/env bash
# thumbd's page in headless Chromium over the DevTools protocol (scripts/pagetest.py): tiles
# sized from the laid-out grid and asked again when they grow, file names as captions, a
# tile that fails after done marked failed, signing on, a restart under an open page, and
# focus sent once the user scrolls (not repeated for the screen the POST named), a warm
# grid filled from its POST's answer alone, and the module's painter (a tile loaded on
# screen at the next frame).
source "$(dirname "$0")/lib.sh"
command -v chromium >/dev/null || fail "chromium is not installed (scripts/test installs it)"
start_origin
# A noisy image: its tile is too large to come inline, so the page loads it by its src.
python3 - "$WORK/noise.png" <<'PY'
import sys, pyvips
bands = [pyvips.Image.gaussnoise(180, 180, mean=128, sigma=90).cast("uchar") for _ in range(4)]  # with alpha: a PNG tile
bands[0].bandjoin(bands[1:]).pngsave(sys.argv[1])
PY
curl -s -X PUT --data-binary @"$WORK/noise.png" "$ORIGIN/__put/noise.png" > /dev/null
python3 "$ROOT/scripts/pagetest.py" "$SMOKE_THUMBD" "$ORIGIN" "$WORK"
