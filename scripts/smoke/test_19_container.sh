#!/usr/bin/env bash
# The Dockerfile and the compose example without a container engine (scripts/containertest.py):
# the build stage on this machine (Debian 12, the Swift its FROM names), the run stage in a
# debootstrap Debian 12 root, then two of the image behind Varnish as the compose file wires
# them. The first run on a machine takes a few minutes: a release build and debootstrap
# (both kept under .build-container/ for the next run).
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot, unshare): run scripts/test as root"
python3 "$ROOT/scripts/containertest.py" "$WORK"
