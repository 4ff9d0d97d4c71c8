"""The scenes of scripts/benchrelease.py, one round each, and the alternation of the builds'
rounds: the hot hit, the cold thumbnails and the browser grid."""
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time

from benchpeers import Instructions, cpu_seconds, get, wrk


def alternate(builds, rounds, one):
    """`one(build, round)` for every round, the builds' order swapped each round."""
    results = {build: [] for build in builds}
    for round_ in range(rounds):
        order = builds if round_ % 2 == 0 else list(reversed(builds))
        for build in order:
            results[build].append(one(build, round_))
    return results


# MARK: the scenes: each round gives (wall figure, steady figure) per build

def hot_round(server, path, seconds, work, pinned):
    """(req/s, server CPU us per answer, instructions per answer or None, the CPU's user-space
    part: the build's own work, steadier than the whole, whose kernel part moves the most)."""
    os.sync()  # what the cold scenes wrote is written back before, not beside, the round
    before = cpu_seconds(server.pids)
    before_user = cpu_seconds(server.pids, user_only=True)
    with Instructions(server.pids) as counted:
        if pinned:
            out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c64", "-d%ds" % seconds,
                                  "http://127.0.0.1:%d%s" % (server.port, server.path(path))],
                                 capture_output=True, text=True, check=True).stdout
            rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
            requests = int(re.search(r"(\d+) requests in", out).group(1))
        else:
            rps, _, _, requests = wrk(server.port, [server.path(path)], seconds, work)
    instructions = counted.count / max(1, requests) if counted.count is not None else None
    return (rps, (cpu_seconds(server.pids) - before) * 1e6 / max(1, requests), instructions,
            (cpu_seconds(server.pids, user_only=True) - before_user) * 1e6 / max(1, requests))


def cold_thumbnail_round(server, round_, count):
    """`count` cold thumbnails of a 4000x3000 JPEG at width 256, one at a time, each a new
    origin URL (fetch, check, store the original, decode, resize, encode, store)."""
    paths = [server.path("/file/big.jpg/release-%d-%d" % (round_, i)) + "&w=256&q=80" for i in range(count)]
    before = cpu_seconds(server.pids)
    times = []
    for path in paths:
        started = time.monotonic()
        status, _ = asyncio.run(get(server.port, path))
        if status != 200:
            raise RuntimeError("%s answered %d" % (path, status))
        times.append((time.monotonic() - started) * 1000)
    return statistics.median(times), (cpu_seconds(server.pids) - before) * 1000 / count


def cold_burst_round(server, round_, count):
    """`count` cold thumbnails of a 1200x800 JPEG at width 256, 8 at once: per second, CPU ms each."""
    from benchthumbs import per_second
    paths = [server.path("/file/small.jpg/burst-%d-%d" % (round_, i)) + "&w=256&q=80" for i in range(count)]
    before = cpu_seconds(server.pids)
    return per_second(server.port, paths), (cpu_seconds(server.pids) - before) * 1000 / count


def scene_round(server, round_, count):
    """`count` cold thumbnails in imgproxy's scene (a 2040x1356 JPEG fitted into 512x512, q80
    progressive), 2 at once: per second, CPU ms each."""
    from benchthumbs import per_second
    paths = [server.path("/file/scene.jpg/scene-%d-%d" % (round_, i))
             + "&w=512&h=512&fit=inside&format=jpeg&q=80&progressive=1" for i in range(count)]
    before = cpu_seconds(server.pids)
    return per_second(server.port, paths, concurrency=2), (cpu_seconds(server.pids) - before) * 1000 / count


def grid_rounds(previous, current, rounds, work):
    """The grid (scripts/benchgrid.py's scene) on thumbd's own page: a fresh daemon each
    round, cold then warm, alternated between the builds. The warm page is loaded three
    times a round and the round's figure is their median: one warm load varies by ±15%
    here, and one sample a round flagged noise as a change (1.18 on 2026-11-29, 1.02 with
    15 samples a build)."""
    from benchbrowser import load
    from benchgrid import Thumbd as GridThumbd
    from benchgridorigin import Origin as GridOrigin, make_photos
    photos = os.path.join(work, "photos")
    os.makedirs(photos)
    print("benchrelease: making the grid's 120 photos", file=sys.stderr, flush=True)
    names = make_photos(photos, 60, 60)
    origin = GridOrigin(photos)
    urls = [origin.url(n) for n in names]
    try:
        def one(build, round_):
            daemon = GridThumbd(build[1], work, "grid-%s-%d" % (build[0], round_))
            try:
                before = daemon.cpu_seconds()
                cold = load(work, daemon.url("/"), len(names), paste=urls)
                cpu = (daemon.cpu_seconds() - before) * 1000 / len(names)
                warms = [load(work, daemon.url("/"), len(names), paste=urls)["all"] for _ in range(3)]
                print("  %-8s cold first %.2f s, all %.2f s, warm %s s, %.1f ms CPU a tile" % (
                    build[0], cold["first"], cold["all"], "/".join("%.2f" % w for w in warms), cpu), file=sys.stderr, flush=True)
                return cold["first"], cold["all"], statistics.median(warms), cpu
            finally:
                daemon.stop()
        return alternate([previous, current], rounds, one)
    finally:
        origin.stop()
