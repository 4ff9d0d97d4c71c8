#!/usr/bin/env bash
# Out of file descriptors, the daemon neither spins nor dies: started with at most 96 open
# files, it is sent 300 connections. Its event loops accept until accept(2) fails with
# EMFILE, then stop watching the listening socket for 250 ms at a time (a socket that stays
# readable would wake them at once, forever): over 2 s at the limit it must use less than a
# quarter of a core, log the failure, and once the clients leave answer /healthz again.
source "$(dirname "$0")/lib.sh"
command -v prlimit > /dev/null || fail "prlimit (util-linux) is missing"
echo "{}" > "$WORK/empty.yaml"
SMOKE_THUMBD_REAL="$SMOKE_THUMBD"
SMOKE_THUMBD="$WORK/limited"
printf '#!/bin/sh\nexec prlimit --nofile=96:96 "%s" "$@"\n' "$SMOKE_THUMBD_REAL" > "$SMOKE_THUMBD"
chmod +x "$SMOKE_THUMBD"
start_thumbd --db "$WORK/cache.sqlite" --config "$WORK/empty.yaml"
python3 - "$THUMBD" "$THUMBD_PID" "$WORK/thumbd.err" <<'PY'
import os, socket, sys, time, urllib.request
base, pid, errors = sys.argv[1], int(sys.argv[2]), sys.argv[3]
port = int(base.rsplit(":", 1)[1])
tick = os.sysconf("SC_CLK_TCK")

def cpu():
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick

def open_files():
    return len(os.listdir("/proc/%d/fd" % pid))

clients = []
for _ in range(300):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    clients.append(s)
# The kernel completes each handshake into the backlog; the daemon accepts up to its limit.
deadline = time.monotonic() + 10
while open_files() < 90 and time.monotonic() < deadline:
    time.sleep(0.05)
if open_files() < 90:
    sys.exit("   the daemon never reached its descriptor limit: %d open" % open_files())
time.sleep(0.5)
before = cpu()
time.sleep(2)
spent = cpu() - before
if spent >= 0.5:
    sys.exit("   at the descriptor limit the daemon used %.2f s of CPU in 2 s: it spins" % spent)
log = open(errors).read()
if "Too many open files" not in log:
    sys.exit("   no log line says accept failed: %s" % log[-500:])
for s in clients:
    s.close()
answered = None
deadline = time.monotonic() + 15
while time.monotonic() < deadline and answered is None:
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=2) as r:
            answered = r.status
    except OSError:
        time.sleep(0.2)
if answered != 200:
    sys.exit("   /healthz did not answer 200 once the clients left (%r)" % answered)
os.kill(pid, 0)
print("   at the limit: %.2f s of CPU in 2 s, then /healthz 200" % spent)
PY
echo "   ok"
