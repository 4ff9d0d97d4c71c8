#!/usr/bin/env bash
# scripts/install in a throwaway root: the binary, the unit and the settings where the
# README says, idempotent (a second run changes nothing and says so), the user's settings
# never overwritten, the installed binary runs (`thumbd check` on the installed settings);
# --uninstall removes the binary and the unit and keeps the settings and the cache;
# --purge removes those too.
source "$(dirname "$0")/lib.sh"
root="$WORK/root"
"$ROOT/scripts/install" --root "$root" --binary "$SMOKE_THUMBD" > "$WORK/first" || fail "install: $(cat "$WORK/first")"
for file in usr/local/bin/thumbd etc/systemd/system/thumbd.service etc/thumbd/thumbd.yaml; do
  [ -f "$root/$file" ] || fail "not installed: /$file"
  grep -q "installed  $root/$file" "$WORK/first" || fail "did not say it installed /$file: $(cat "$WORK/first")"
done
[ -x "$root/usr/local/bin/thumbd" ] || fail "the binary is not executable"
cmp -s "$root/etc/systemd/system/thumbd.service" "$ROOT/config/systemd/thumbd.service" || fail "the unit differs"
"$root/usr/local/bin/thumbd" check --config "$root/etc/thumbd/thumbd.yaml" > /dev/null || fail "the installed settings do not load"
"$ROOT/scripts/install" --root "$root" --binary "$SMOKE_THUMBD" > "$WORK/second" || fail "second install failed"
grep -q "^installed\|^updated" "$WORK/second" && fail "a second install changed something: $(cat "$WORK/second")"
grep -q "unchanged  $root/usr/local/bin/thumbd" "$WORK/second" || fail "the second run did not say unchanged: $(cat "$WORK/second")"
# The user's settings are theirs.
echo "# mine" >> "$root/etc/thumbd/thumbd.yaml"
"$ROOT/scripts/install" --root "$root" --binary "$SMOKE_THUMBD" > "$WORK/third" || fail "third install failed"
grep -q "# mine" "$root/etc/thumbd/thumbd.yaml" || fail "install overwrote the user's settings"
grep -q "kept       $root/etc/thumbd/thumbd.yaml" "$WORK/third" || fail "did not say it kept the settings"
mkdir -p "$root/var/lib/thumbd" && touch "$root/var/lib/thumbd/thumbd.sqlite"
"$ROOT/scripts/install" --root "$root" --uninstall > "$WORK/uninstall" || fail "uninstall failed"
[ ! -e "$root/usr/local/bin/thumbd" ] && [ ! -e "$root/etc/systemd/system/thumbd.service" ] || fail "uninstall left the binary or unit"
[ -f "$root/etc/thumbd/thumbd.yaml" ] && [ -f "$root/var/lib/thumbd/thumbd.sqlite" ] || fail "uninstall removed settings or cache"
"$ROOT/scripts/install" --root "$root" --uninstall > /dev/null || fail "a second uninstall failed"
"$ROOT/scripts/install" --root "$root" --uninstall --purge > "$WORK/purge" || fail "purge failed"
[ ! -e "$root/etc/thumbd" ] && [ ! -e "$root/var/lib/thumbd" ] || fail "--purge left settings or cache"
echo "   install, reinstall, keep the user's settings, uninstall, purge: ok"
