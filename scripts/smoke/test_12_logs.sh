#!/usr/bin/env bash
# log.format json and log.file: every line is a JSON object (a request's carries its id);
# libvips's warnings come through the same log, not raw on stderr; SIGHUP reopens the file
# after logrotate moved it, and the daemon goes on serving.
source "$(dirname "$0")/lib.sh"
start_origin
# A JPEG cut in half: its header reads; asked at its whole size (w=400), which libvips's
# loader decodes (libjpeg decodes the smaller ones itself), the decode warns ("error in
# tile", "premature end").
python3 - "$WORK/cut.jpg" <<'PY'
import sys, pyvips
image = pyvips.Image.black(400, 300, bands=3) + 90
data = image.jpegsave_buffer(Q=90)
open(sys.argv[1], "wb").write(data[: len(data) // 2])
PY
curl -s -X PUT --data-binary @"$WORK/cut.jpg" "$ORIGIN/__put/cut.jpg" > /dev/null
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true THUMBD_LOG_FORMAT=json THUMBD_LOG_FILE="$WORK/thumbd.log" \
  THUMBD_LOG_ACCESS=true start_thumbd --db "$WORK/cache.sqlite"
curl -s -o /dev/null -H 'X-Request-Id: smoke-json-1' "$THUMBD/thumb?url=$(urlencode "$ORIGIN/file/cut.jpg")&w=400"
for _ in $(seq 100); do grep -q 'smoke-json-1' "$WORK/thumbd.log" 2>/dev/null && break; sleep 0.05; done
python3 - "$WORK/thumbd.log" <<'PY' || fail "the log: $(cat "$WORK/thumbd.log")"
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1])]  # every line is one JSON object
assert all({"time", "level", "label", "message"} <= set(l) for l in lines), lines
assert any(l.get("request.id") == "smoke-json-1" and l["label"] == "thumbd.access" for l in lines), "no access line with the id"
assert any(l["message"] == "library" and l.get("library.domain") == "VIPS" for l in lines), "no libvips warning"
PY
if grep -q 'VIPS-WARNING\|error in tile' "$WORK/thumbd.err"; then fail "libvips wrote to stderr: $(cat "$WORK/thumbd.err")"; fi

mv "$WORK/thumbd.log" "$WORK/thumbd.log.1"
kill -HUP "$THUMBD_PID"
for _ in $(seq 100); do [ -s "$WORK/thumbd.log" ] && break; sleep 0.05; done
grep -q 'log.reopened' "$WORK/thumbd.log" || fail "no new log after SIGHUP: $(ls "$WORK")"
kill -0 "$THUMBD_PID" || fail "SIGHUP ended the daemon"
curl -s -o /dev/null -H 'X-Request-Id: smoke-json-2' "$THUMBD/healthz"
for _ in $(seq 100); do grep -q 'smoke-json-2' "$WORK/thumbd.log" && break; sleep 0.05; done
grep -q 'smoke-json-2' "$WORK/thumbd.log" || fail "lines after SIGHUP did not reach the new file"
if grep -q 'smoke-json-2' "$WORK/thumbd.log.1"; then fail "lines after SIGHUP went to the moved file"; fi
