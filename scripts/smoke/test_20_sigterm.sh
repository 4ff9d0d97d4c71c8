#!/usr/bin/env bash
# SIGTERM at any moment after start stops the daemon cleanly: 100 tries, half sent the
# instant "listening" is read, half a random 0-30 ms after it. Each must exit 0 (not be killed
# by the signal) with the database closed: "thumbd.stopped" logged and no -wal file left (SQLite
# removes it when the last connection closes; a killed process leaves it).
source "$(dirname "$0")/lib.sh"
python3 - "$SMOKE_THUMBD" "$WORK" <<'PY'
import os, random, signal, subprocess, sys, time
binary, work = sys.argv[1], sys.argv[2]
with open(os.path.join(work, "empty.yaml"), "w") as f:
    f.write("{}\n")
bad = []
for i in range(100):
    db = os.path.join(work, "t%d.sqlite" % i)
    with open(os.path.join(work, "err%d" % i), "w") as err:
        proc = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--db", db, "--config",
                                 os.path.join(work, "empty.yaml")], stdout=subprocess.PIPE, stderr=err, text=True)
        line = proc.stdout.readline()
        if i % 2:
            time.sleep(random.uniform(0, 0.03))
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill(); proc.wait(); status = "hung"
    log = open(os.path.join(work, "err%d" % i)).read()
    if "listening" not in line or status != 0 or "thumbd.stopped" not in log or os.path.exists(db + "-wal"):
        bad.append((i, status, line.strip(), os.path.exists(db + "-wal"), log[-300:]))
for case in bad[:5]:
    print("   try %d: exit %s, stdout %r, -wal left: %s, log: %s" % case, file=sys.stderr)
print("   %d of 100 SIGTERMs stopped it cleanly" % (100 - len(bad)))
sys.exit(1 if bad else 0)
PY
