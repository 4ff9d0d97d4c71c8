#!/usr/bin/env bash
# The README's examples work as printed: every shell example after the quick start, run
# against the real daemon and a local origin (scripts/readme_examples.py).
source "$(dirname "$0")/lib.sh"
start_origin
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true start_thumbd --db "$WORK/cache.sqlite"
python3 "$ROOT/scripts/readme_examples.py" "$ROOT/README.md" "$THUMBD" "$ORIGIN" "$SMOKE_THUMBD" "$WORK"
