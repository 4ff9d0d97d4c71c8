#!/usr/bin/env python3
"""This build beside the previous release, in alternated rounds: the scenes where users feel
a release (the hot hit, unpinned and pinned to one core; the cold thumbnail of a 4000x3000
photo, and 1200x800 ones 8 at once; the browser grid, cold and warm), each with its median,
its spread (lowest–highest round) and a steadier figure beside the wall time (the server's
CPU per answer or per tile). The hot hit and the cold thumbnail are also counted in
instructions under callgrind (scripts/benchinstructions.py), twice a build: a figure the
machine's noise does not move, which tells a 1% change.

The previous release is found from git, not from tags (tags may not travel): CHANGELOG.md
lists the releases, newest first; the one before this build's (`BuildInfo.version`) is the
previous, and its build is the last commit at which `BuildInfo.swift` still named it (the
commit before the one that moved the version on; HEAD itself if nothing did). It is checked
out in a worktree under .build/releases/ and built there with its own scripts/build, once
per commit. `--against REV` names another commit.

Rounds alternate which build goes first (A B, B A, ...), so both see the same noise. A row is
flagged `WORSE` when this build's median is more than 10% worse than the previous one's
and beyond the spread: even this build's best round is worse than the previous median.
A row more than 10% worse within the spread says `noise?`.
"""
import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from benchpeers import Instructions, Origin, Thumbd, pin, warm  # noqa: E402
from benchinstructions import COLD_THUMBNAILS, HOT_REQUESTS, counted_scenes, floor_instructions  # noqa: E402
from benchreleasescenes import (alternate, cold_burst_round, cold_thumbnail_round, grid_rounds, hot_round,  # noqa: E402
                                scene_round)

BUILD_INFO = "Sources/ThumbdCore/Daemon/BuildInfo.swift"


# MARK: finding and building the previous release

def git(*args):
    return subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True, check=True).stdout


def version_in(text):
    match = re.search(r'static let version = "([^"]+)"', text)
    return match.group(1) if match else None


def releases():
    """The releases CHANGELOG.md names, newest first."""
    with open(os.path.join(ROOT, "CHANGELOG.md")) as f:
        return re.findall(r"^- (\d+\.\d+\.\d+) —", f.read(), re.M)


def previous_release():
    """(version, commit) of the release before this working tree's."""
    with open(os.path.join(ROOT, BUILD_INFO)) as f:
        current = version_in(f.read())
    listed = releases()
    older = listed[listed.index(current) + 1:] if current in listed else listed
    if not older:
        raise SystemExit("benchrelease: CHANGELOG.md names no release before %s" % current)
    wanted = older[0]
    # BuildInfo.swift's history, newest first, with the version each commit set.
    commits = git("log", "--format=%H", "--", BUILD_INFO).split()
    versions = [version_in(git("show", "%s:%s" % (c, BUILD_INFO))) for c in commits]
    if wanted not in versions:
        raise SystemExit("benchrelease: no commit of %s names %s" % (BUILD_INFO, wanted))
    at = versions.index(wanted)
    if at == 0:
        return wanted, git("rev-parse", "HEAD").strip()
    # The commit that moved the version on from `wanted`: its parent is the release's last.
    return wanted, git("rev-parse", commits[at - 1] + "^").strip()


def build_at(commit):
    """The release binary of `commit`, built in a worktree of its own (kept for next time)."""
    tree = os.path.join(ROOT, ".build", "releases", commit[:12])
    if not os.path.isdir(tree):
        os.makedirs(os.path.dirname(tree), exist_ok=True)
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "--force", tree, commit],
                       check=True, stdout=subprocess.DEVNULL)
    print("benchrelease: building %s in %s" % (commit[:12], tree), file=sys.stderr, flush=True)
    out = subprocess.run([os.path.join(tree, "scripts", "build")], cwd=tree, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit("benchrelease: %s did not build" % commit[:12])
    return out.stdout.strip().splitlines()[-1]


# MARK: running and reporting

def spread(values):
    return "%s–%s" % (fmt(min(values)), fmt(max(values)))


def fmt(value):
    return "%.0f" % value if abs(value) >= 100 else "%.2f" % value


def verdict(old, new, higher_is_better):
    """'', 'noise?' or 'WORSE' for this build's figures `new` against `old`."""
    o, n = statistics.median(old), statistics.median(new)
    worse = (o - n) / o if higher_is_better else (n - o) / o
    if worse <= 0.10:
        return ""
    best = max(new) if higher_is_better else min(new)
    beyond = best < o if higher_is_better else best > o
    return "WORSE" if beyond else "noise?"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--thumbd", required=True, help="this build's binary")
    parser.add_argument("--against", help="a commit to compare with (default: the previous release)")
    parser.add_argument("--previous-binary", help="the previous build's binary, already built")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of the hot and cold scenes (8)")
    parser.add_argument("--grid-rounds", type=int, default=5, help="rounds of the browser grid (5; 0 leaves it out)")
    parser.add_argument("--seconds", type=int, default=4, help="seconds of wrk per hot round (4)")
    parser.add_argument("--only", action="append", choices=["hot", "pinned", "cold", "counted", "grid"])
    args = parser.parse_args()
    wanted = set(args.only or ["hot", "pinned", "cold", "counted", "grid"])

    if args.previous_binary:
        label, binary = "previous", os.path.abspath(args.previous_binary)
    else:
        if args.against:
            label, commit = args.against, git("rev-parse", args.against).strip()
        else:
            label, commit = previous_release()
        binary = build_at(commit)
    previous = (label, binary)
    current = ("this", os.path.abspath(args.thumbd))
    builds = [previous, current]
    print("benchrelease: %s (%s) beside this build (%s); %d rounds, alternated" % (
        label, binary, current[1], args.rounds), file=sys.stderr, flush=True)

    counted_floor = None
    work = tempfile.mkdtemp(prefix="thumbd-benchrelease-")
    files = os.path.join(work, "files")
    os.makedirs(files)
    rows = []  # (scene, metric, previous figures, this build's figures, higher is better)
    try:
        if wanted & {"hot", "pinned", "cold", "counted"}:
            import pyvips  # noqa: F401  (the photo below)
            from benchthumbs import photo
            for name, size in (("big.jpg", (4000, 3000)), ("small.jpg", (1200, 800)), ("scene.jpg", (2040, 1356))):
                with open(os.path.join(files, name), "wb") as f:
                    f.write(photo(*size))
            os.environ["BENCH_FILES"] = files
            origin = Origin()
            servers = {}
            try:
                for name, binary in builds:
                    servers[name] = Thumbd(binary, origin, work, name="thumbd-" + re.sub(r"\W", "-", name))
                hot_path = "/img/release-hot.jpg?size=14336"
                for server in servers.values():
                    asyncio.run(warm(server.port, [server.path(hot_path)]))
                for scene, pinned in (("hot", False), ("pinned", True)):
                    if scene not in wanted:
                        continue
                    title = ("hot hit, 14 KB, server on core 0 and wrk on core 1" if pinned
                             else "hot hit, 14 KB, unpinned (wrk -t1 -c64)")
                    print("benchrelease: %s" % title, file=sys.stderr, flush=True)
                    if pinned:
                        for server in servers.values():
                            pin(server.pids, "0x1")
                    try:
                        result = alternate(builds, args.rounds,
                                           lambda b, r: hot_round(servers[b[0]], hot_path, args.seconds, work, pinned))
                    finally:
                        if pinned:
                            for server in servers.values():
                                pin(server.pids, "0x%x" % ((1 << os.cpu_count()) - 1))
                    old, new = result[previous], result[current]
                    rows.append((title, "req/s", [r[0] for r in old], [r[0] for r in new], True))
                    rows.append((title, "server CPU us per answer", [r[1] for r in old], [r[1] for r in new], False))
                    rows.append((title, "of which in user space", [r[3] for r in old], [r[3] for r in new], False))
                    if Instructions.supported():
                        rows.append((title, "server instructions per answer (perf stat)", [r[2] for r in old],
                                     [r[2] for r in new], False))
                for title, figure, higher, round_of, count in () if "cold" not in wanted else (
                        ("cold thumbnail, 4000x3000 JPEG to width 256, one at a time (8 a round)", "median ms", False,
                         cold_thumbnail_round, 8),
                        ("cold thumbnails, 1200x800 JPEG to width 256, 8 at once (96 a round)", "per second", True,
                         cold_burst_round, 96),
                        ("imgproxy's scene: 2040x1356 JPEG fit into 512x512, q80 progressive, 2 at once (24 a round)",
                         "per second", True, scene_round, 24)):
                    print("benchrelease: %s" % title, file=sys.stderr, flush=True)
                    result = alternate(builds, args.rounds, lambda b, r: round_of(servers[b[0]], r, count))
                    old, new = result[previous], result[current]
                    rows.append((title, figure, [r[0] for r in old], [r[0] for r in new], higher))
                    rows.append((title, "server CPU ms per thumbnail", [r[1] for r in old], [r[1] for r in new], False))
                if "counted" in wanted:
                    # Deterministic: two runs a build show it (their spread is about 0.5%).
                    print("benchrelease: instructions, under callgrind", file=sys.stderr, flush=True)
                    for server in servers.values():
                        server.stop()
                    servers = {}
                    result = counted_scenes(builds, origin, work, hot_path)
                    old, new = result[previous], result[current]
                    for i, (title, metric) in enumerate((
                            ("hot hit, 14 KB, %d answers in turn" % HOT_REQUESTS, "instructions per answer (callgrind)"),
                            ("cold thumbnail, 4000x3000 JPEG to width 256, %d in turn" % COLD_THUMBNAILS,
                             "instructions per thumbnail (callgrind)"))):
                        rows.append((title, metric, [r[i] for r in old], [r[i] for r in new], False))
                    # The same count of libvips alone doing thumbd's steps on the same bytes.
                    floor = floor_instructions(os.path.join(files, "big.jpg"), work)
                    counted_floor = (floor, statistics.median(r[1] for r in old), statistics.median(r[1] for r in new))
            finally:
                for server in servers.values():
                    server.stop()
                origin.stop()
        if "grid" in wanted and args.grid_rounds > 0:
            title = "the grid: 120 photos on thumbd's page in headless Chromium"
            print("benchrelease: %s" % title, file=sys.stderr, flush=True)
            result = grid_rounds(previous, current, args.grid_rounds, work)
            old, new = result[previous], result[current]
            for i, metric in enumerate(("cold: first screen s", "cold: all tiles s", "warm: all tiles s",
                                        "cold: server CPU ms per tile")):
                rows.append((title, metric, [r[i] for r in old], [r[i] for r in new], False))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print("| scene | metric | %s: median | spread | this build: median | spread | this/previous | |" % label)
    print("|---|---|---:|---:|---:|---:|---:|---|")
    flagged = 0
    for scene, metric, old, new, higher in rows:
        flag = verdict(old, new, higher)
        flagged += flag == "WORSE"
        print("| %s | %s | %s | %s | %s | %s | %.2f | %s |" % (
            scene, metric, fmt(statistics.median(old)), spread(old), fmt(statistics.median(new)), spread(new),
            statistics.median(new) / statistics.median(old), flag))
    print("\n%s, %d cores; %d rounds (grid: %d), alternated; WORSE: more than 10%% worse and beyond the spread" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), args.rounds, args.grid_rounds))
    if counted_floor:
        floor, old_cold, new_cold = counted_floor
        print("The cold thumbnail's floor, counted the same way: libvips in one Python process doing thumbd's "
              "steps on the same 4000x3000 JPEG, %.0f instructions per thumbnail; the cold thumbnail counts %.3fx "
              "that in %s and %.3fx in this build (user space; the kernel's part of fetching and storing is not "
              "in either count)." % (floor, old_cold / floor, label, new_cold / floor))
    if not Instructions.supported():
        print("Instructions per answer: this machine exposes no instruction counter to perf stat; callgrind's "
              "count stands in for it (user space only: thumbd's code and its libraries', not the kernel's).")
    if flagged:
        print("benchrelease: %d figure(s) more than 10%% worse than %s" % (flagged, label), file=sys.stderr)


if __name__ == "__main__":
    main()
