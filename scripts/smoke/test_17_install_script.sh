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

# Where Swift is not on the PATH (root's, under sudo): the binary built before is installed,
# and with none, a message says what to do. A copy of the scripts and settings, not the repo.
repo="$WORK/repo"
mkdir -p "$repo/scripts" "$repo/.build/release"
cp "$ROOT/scripts/install" "$ROOT/scripts/setup" "$repo/scripts/"
cp -r "$ROOT/config" "$repo/"
noswift="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PATH="$noswift" command -v swift > /dev/null && fail "swift is on $noswift: the case cannot be made here"
status=0
env -u SUDO_USER PATH="$noswift" "$repo/scripts/install" --root "$WORK/root2" > "$WORK/none" 2>&1 || status=$?
[ "$status" = 1 ] && grep -q "run scripts/build as yourself first" "$WORK/none" || fail "no swift, nothing built: exit $status: $(cat "$WORK/none")"
cp "$SMOKE_THUMBD" "$repo/.build/release/thumbd"
env -u SUDO_USER PATH="$noswift" "$repo/scripts/install" --root "$WORK/root2" > "$WORK/built" 2>&1 ||
  fail "no swift, a binary built before: $(cat "$WORK/built")"
grep -q "installing the binary built before" "$WORK/built" && cmp -s "$SMOKE_THUMBD" "$WORK/root2/usr/local/bin/thumbd" ||
  fail "the binary built before was not installed: $(cat "$WORK/built")"
echo "   install, reinstall, keep the user's settings, uninstall, purge; without Swift on the PATH: ok"
