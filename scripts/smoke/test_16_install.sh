#!/usr/bin/env bash
# Installing it for real: the systemd unit passes systemd-analyze verify and its offline
# security review (exposure at most 2.0: DynamicUser, ProtectSystem=strict, StateDirectory,
# MemoryMax); started as the unit starts it (working directory its state directory, no
# config/ there, THUMBD_STORE_PATH from the unit), the daemon says which settings file it
# loaded and serves; .dockerignore keeps the build products out of the image's context.
source "$(dirname "$0")/lib.sh"
unit="$ROOT/config/systemd/thumbd.service"
for key in DynamicUser=yes ProtectSystem=strict StateDirectory=thumbd MemoryMax= NoNewPrivileges=yes \
           'ExecStart=/usr/local/bin/thumbd serve' 'ExecReload=/bin/kill -HUP $MAINPID' RestartPreventExitStatus=78; do
  grep -q "^$key" "$unit" || fail "the unit lacks $key"
done
if command -v systemd-analyze > /dev/null; then
  # Verified as installed, with ExecStart pointing at the binary under test.
  sed "s|/usr/local/bin/thumbd|$SMOKE_THUMBD|" "$unit" > "$WORK/thumbd.service"
  systemd-analyze verify "$WORK/thumbd.service" 2> "$WORK/verify" || fail "systemd-analyze verify: $(cat "$WORK/verify")"
  exposure=$(systemd-analyze security --offline=yes "$WORK/thumbd.service" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  [ -n "$exposure" ] || fail "no exposure level from systemd-analyze security"
  python3 -c "import sys; sys.exit(0 if float('$exposure') <= 2.0 else 1)" || fail "exposure $exposure is over 2.0"
  echo "   systemd-analyze: verified, exposure $exposure"
fi

# As the unit runs it: in its state directory, settings from the environment and /etc.
mkdir -p "$WORK/state"
store="$(sed -n 's/^Environment=THUMBD_STORE_PATH=//p' "$unit")"
[ "$store" = /var/lib/thumbd/thumbd.sqlite ] || fail "the unit's store path: $store"
# exec: the PID the cleanup stops is the daemon's, not a subshell's.
(cd "$WORK/state" && THUMBD_STORE_PATH="$WORK/state/thumbd.sqlite" exec "$SMOKE_THUMBD" serve --listen 127.0.0.1:0 \
   > "$WORK/thumbd.out" 2> "$WORK/thumbd.err") &
pid=$!
PIDS+=($pid)
for _ in $(seq 200); do grep -q listening "$WORK/thumbd.out" 2>/dev/null && break; sleep 0.05; done
base="$(awk '/listening on/{print $4}' "$WORK/thumbd.out")"
[ -n "$base" ] || fail "did not start: $(cat "$WORK/thumbd.err")"
expected="config.file=none"; [ -f /etc/thumbd/thumbd.yaml ] && expected="config.file=/etc/thumbd/thumbd.yaml"
grep -q "$expected" "$WORK/thumbd.err" || fail "the start does not say which settings file: $(head -3 "$WORK/thumbd.err")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/healthz")" = 200 ] || fail "not healthy"
[ -f "$WORK/state/thumbd.sqlite" ] || fail "the cache is not in the state directory"

for pattern in '.build/' '.git/' 'var/' '*.sqlite'; do
  grep -qxF "$pattern" "$ROOT/.dockerignore" || fail ".dockerignore lacks $pattern"
done
