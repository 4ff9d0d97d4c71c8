#!/usr/bin/env python3
"""thumbd under the images and requests any web page can send it, in one run.

1. Cheap work under attack: 40 clients ask 40 distinct heavy variants of a cached
   7070x7070 PNG (the largest legal source) and leave after 2 s; meanwhile and right after,
   one client asks small-image misses (a new URL each, an 8x8 PNG), one at a time, and wrk
   asks hits (a cached 1200x800 JPEG) on one keep-alive connection, back to back.
   Latencies p50/p99 over the 5 s window; the same probes without the attack give the floor.
2. Memory under attack: a fresh daemon, its RSS once warm (baseline), then at once: the
   1x20000 PNG at 256x256, fifty distinct 7070x7070 PNGs at width 256, and ten 16-MP AVIF
   variants. Peak RSS (VmHWM, the kernel's own peak) against baseline + 1.5 x
   thumbnails.maxMemoryBytes. Run with the shipped settings, then with
   thumbnails.maxAvifPixels raised to 16 MP so that the AVIF encodes do run (a changed
   setting, said so in its row).
3. The processing options at their most costly, at once (memory as in 2).
4. Downloads at once: sixty distinct 18 MiB originals asked as they are (no resize): the
   bodies' memory against upstream.maxBufferedBytes + one maxObjectBytes, and the same with
   the budget set out of reach (a changed setting: how thumbd ran before it had one).

`--before BINARY` runs the same against another build (the previous release) beside it.
Every daemon runs with its shipped settings, except loopback origins allowed.
"""
import argparse
import asyncio
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse

import pyvips

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchpeers import Origin, Thumbd, get, proc_status  # noqa: E402

MAX_MEMORY_BYTES = 512 << 20  # thumbnails.maxMemoryBytes, shipped
MAX_BUFFERED_BYTES = 128 << 20  # upstream.maxBufferedBytes, shipped
MAX_OBJECT_BYTES = 20 << 20  # upstream.maxObjectBytes, shipped


def images():
    """The hostile set and the cheap ones, drawn with libvips."""
    def gradient(width, height):
        xyz = pyvips.Image.xyz(width, height)
        red = xyz[0] * (255.0 / width)
        green = xyz[1] * (255.0 / height)
        return red.bandjoin([green, (red + green) / 2]).cast("uchar").copy(interpretation="srgb")
    small = gradient(1200, 800)
    # 60 frames of 640x640 (24.6 million pixels in all, under maxSourcePixels): kept
    # animated, each decoded whole; and 5000 frames of 16x16 (more than maxFrames).
    def frames(width, height, count):
        # One tall gradient cut into frames by its page height: each frame differs.
        image = gradient(width, height * count)
        image.set_type(pyvips.GValue.gint_type, "page-height", height)
        image.set_type(pyvips.GValue.array_int_type, "delay", [40] * count)
        return image.gifsave_buffer(effort=1)
    # Noise does not compress: a 2450x2450 RGB PNG of it is about 18 MiB, under maxObjectBytes.
    noise = (pyvips.Image.gaussnoise(2450, 2450, sigma=80, mean=128).cast("uchar").bandjoin([
        pyvips.Image.gaussnoise(2450, 2450, sigma=80, mean=128).cast("uchar")] * 2).copy(interpretation="srgb"))
    return {
        "noise.png": noise.pngsave_buffer(compression=1),
        "frames.gif": frames(640, 640, 60),
        "many.gif": frames(16, 16, 5000),
        "needle.png": gradient(1, 20000).pngsave_buffer(),
        "max.png": gradient(7070, 7070).pngsave_buffer(compression=9),
        "tiny.png": gradient(8, 8).pngsave_buffer(),
        "small.jpg": small.jpegsave_buffer(Q=85),
    }


def path(daemon, name, tag, extra=""):
    return "/thumb?url=" + urllib.parse.quote(daemon.origin.url("/file/%s/%s" % (name, tag)), safe="") + extra


async def hold_and_leave(port, target, seconds):
    """Sends one request and hangs up after `seconds` (a client that scrolled away)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % target).encode())
    await writer.drain()
    try:
        await asyncio.wait_for(reader.read(1), timeout=seconds)
    except asyncio.TimeoutError:
        pass
    writer.close()


async def probe(port, make_path, until, results):
    """One request at a time until `until` (monotonic): its latency in ms and status."""
    i = 0
    while time.monotonic() < until:
        start = time.monotonic()
        try:
            status, _ = await get(port, make_path(i))
        except Exception:
            status = 0
        results.append(((time.monotonic() - start) * 1000, status))
        i += 1
        await asyncio.sleep(0.02)


def pct(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


async def wrk_hits(port, target, seconds):
    """Hits on one keep-alive connection, back to back, for `seconds` (wrk, a C client in its
    own process, so that the Python prober's own turns are not counted): p50 and p99 ms."""
    proc = await asyncio.create_subprocess_exec(
        "wrk", "-t1", "-c1", "-d%ds" % seconds, "--latency", "http://127.0.0.1:%d%s" % (port, target),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    out = (await proc.communicate())[0].decode()

    def latency(p):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)\s*$" % p, out, re.M)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    return latency(50), latency(99), requests


def under_attack(daemon, run, attack=True):
    """Scenario 1 against `daemon` (without the attackers: the same probes, the floor)."""
    port = daemon.port
    asyncio.run(get(port, path(daemon, "max.png", "cached")))  # the big original, cached
    asyncio.run(get(port, path(daemon, "small.jpg", "hit")))
    heavy = [path(daemon, "max.png", "cached", "&w=%d&h=%d&format=png" % (4000 - i, 4000 - i)) for i in range(40)]

    async def scene():
        misses = []
        until = time.monotonic() + 5.0
        attackers = [asyncio.ensure_future(hold_and_leave(port, target, 2.0)) for target in heavy] if attack else []
        await asyncio.sleep(0.2)  # the attack is queued before the first probe
        results = await asyncio.gather(
            wrk_hits(port, path(daemon, "small.jpg", "hit"), 5),
            probe(port, lambda i: path(daemon, "tiny.png", "miss-%d-%d-%d" % (run, attack, i)), until, misses),
            *attackers)
        hits = results[0]
        # Right after the attackers left: one more small miss.
        start = time.monotonic()
        status, _ = await get(port, path(daemon, "tiny.png", "after-%d-%d" % (run, attack)))
        return misses, hits, ((time.monotonic() - start) * 1000, status)
    misses, hits, after = asyncio.run(scene())
    return {
        "miss p50": pct([m for m, _ in misses], 50), "miss p99": pct([m for m, _ in misses], 99),
        "misses": len(misses), "miss errors": sum(1 for _, s in misses if s != 200),
        "hit p50": hits[0], "hit p99": hits[1], "hits": hits[2], "after": after[0],
    }


def hostile_targets(daemon):
    """The hostile set: a needle, 50 distinct 7070x7070 PNGs, ten 16-MP AVIFs."""
    targets = [path(daemon, "needle.png", "n", "&w=256&h=256")]
    targets += [path(daemon, "max.png", "m-%d" % i, "&w=256") for i in range(50)]
    targets += [path(daemon, "max.png", "m-0", "&w=%d&h=%d&format=avif" % (4000 - i, 4000 - i)) for i in range(10)]
    return targets


def option_targets(daemon):
    """The processing options at their most costly: 20 distinct 60-frame 640x640 animations
    kept animated, 20 distinct 5000-frame GIFs, 20 of the largest blur allowed on a 900x900
    output of a 7070x7070 PNG, 20 crops far outside it, 20 of the largest sharpen."""
    targets = [path(daemon, "frames.gif", "f-%d" % i, "&w=256&format=webp") for i in range(20)]
    targets += [path(daemon, "many.gif", "g-%d" % i, "&w=16&format=webp") for i in range(20)]
    targets += [path(daemon, "max.png", "m-0", "&w=900&h=900&blur=%d" % (100 - i)) for i in range(20)]
    targets += [path(daemon, "max.png", "m-0", "&crop=%d,9000000,10,10" % i) for i in range(20)]
    targets += [path(daemon, "max.png", "m-0", "&w=900&h=900&sharpen=%d" % (100 - i)) for i in range(20)]
    return targets


def download_targets(daemon):
    """Sixty distinct 18 MiB originals, no resize: the bytes pass through as they came."""
    return [path(daemon, "noise.png", "d-%d" % i) for i in range(60)]


def memory(binary, origin, work, name, extra=None, targets_of=hostile_targets):
    """Scenario 2 on a fresh daemon; returns (baseline MB, peak MB, seconds, statuses)."""
    daemon = Thumbd(binary, origin, work, name=name, extra=extra)
    try:
        port = daemon.port
        asyncio.run(get(port, path(daemon, "tiny.png", "warm", "&w=4")))
        time.sleep(0.5)
        baseline = proc_status(daemon.pids)[1]
        targets = targets_of(daemon)

        async def all_at_once():
            return await asyncio.gather(*(get(port, t) for t in targets), return_exceptions=True)
        start = time.monotonic()
        results = asyncio.run(all_at_once())
        took = time.monotonic() - start
        statuses = {}
        for result in results:
            key = result[0] if isinstance(result, tuple) else "error"
            statuses[key] = statuses.get(key, 0) + 1
        with open("/proc/%d/status" % daemon.proc.pid) as f:
            peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024.0
        return baseline, peak, took, statuses
    finally:
        daemon.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--thumbd", required=True)
    parser.add_argument("--before", help="another thumbd build to run beside it (the previous release)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round of the attack")
    parser.add_argument("--only", choices=["attack", "memory", "downloads"],
                        help="the attack alone, the memory scenes alone, or the downloads scene alone")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 1
    work = tempfile.mkdtemp(prefix="thumbd-hostile-")
    files = os.path.join(work, "files")
    os.makedirs(files)
    for name, data in images().items():
        with open(os.path.join(files, name), "wb") as f:
            f.write(data)
    os.environ["BENCH_FILES"] = files
    origin = Origin()
    builds = [("thumbd", os.path.abspath(args.thumbd))]
    if args.before:
        builds.append(("before", os.path.abspath(args.before)))
    rows = []
    try:
        for label, binary in builds:
            print("benchhostile: %s, cheap work under attack" % label, file=sys.stderr)
            for attack in (False, True) if args.only not in ("memory", "downloads") else ():
                figures = []
                for run in range(args.rounds):
                    daemon = Thumbd(binary, origin, work, name="%s-attack-%d-%d" % (label, attack, run))
                    try:
                        figures.append(under_attack(daemon, run, attack))
                    finally:
                        daemon.stop()
                scene = ("40 clients ask distinct heavy variants and leave after 2 s (median of %d)" if attack
                         else "no attack: the same probes alone (median of %d)") % args.rounds
                for key in ("miss p50", "miss p99", "hit p50", "hit p99", "after"):
                    unit = "ms" if key != "after" else "ms, a small miss after the window"
                    rows.append((scene, "%s %s" % (key, unit) if key != "after" else unit, label,
                                 statistics.median(f[key] for f in figures)))
                rows.append((scene, "small misses / not 200; hits (all rounds)", label, "%d / %d; %d" % (
                    sum(f["misses"] for f in figures), sum(f["miss errors"] for f in figures),
                    sum(f["hits"] for f in figures))))
            for setting, extra, targets_of in (
                    ("shipped settings", None, hostile_targets),
                    ("thumbnails.maxAvifPixels=16000000 (changed)", {"THUMBD_THUMBNAILS_MAX_AVIF_PIXELS": "16000000"},
                     hostile_targets),
                    ("processing options", None, option_targets),
                    ("shipped settings", None, download_targets),
                    ("upstream.maxBufferedBytes=64 GiB (changed: no budget in reach, as before it had one)",
                     {"THUMBD_UPSTREAM_MAX_BUFFERED_BYTES": str(64 << 30)}, download_targets)):
                if (label == "before" and (extra or targets_of is not hostile_targets)) or args.only == "attack":
                    continue  # the key or the options do not exist there; or only the attack was asked
                if args.only == "downloads" and targets_of is not download_targets:
                    continue
                print("benchhostile: %s, memory, %s" % (label, setting), file=sys.stderr)
                baseline, peak, took, statuses = memory(binary, origin, work, "%s-mem-%d" % (label, len(rows)), extra,
                                                        targets_of)
                scene = ("hostile set at once: 1x20000 PNG at 256, 50 distinct 7070x7070 PNGs, ten 16-MP AVIF; " + setting
                         if targets_of is hostile_targets else
                         "options at once: 20 x 60-frame 640x640 GIF kept animated, 20 x 5000-frame GIF, 20 x blur<=100 "
                         "and 20 x sharpen<=100 at 900x900 of a 7070x7070 PNG, 20 crops far outside it"
                         if targets_of is option_targets else
                         "originals at once: 60 distinct 18 MiB PNGs, no resize; " + setting)
                bound = ("bound: 1.5 x maxMemoryBytes = %d" % (1.5 * MAX_MEMORY_BYTES / (1 << 20))
                         if targets_of is not download_targets else
                         "bodies' bound: maxBufferedBytes x 9/8 + maxObjectBytes = %d"
                         % ((MAX_BUFFERED_BYTES * 9 // 8 + MAX_OBJECT_BYTES) >> 20))
                rows.append((scene, "baseline RSS MB", label, baseline))
                rows.append((scene, "peak RSS MB (VmHWM)", label, peak))
                rows.append((scene, "peak - baseline MB (%s)" % bound, label, peak - baseline))
                rows.append((scene, "seconds until all answered", label, took))
                rows.append((scene, "answers by status", label, " ".join("%s:%d" % kv for kv in sorted(statuses.items(), key=str))))
    finally:
        origin.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("| scenario | metric | build | figure |")
    print("|---|---|---|---:|")
    for scenario, metric, label, value in rows:
        shown = ("%.1f" % value if value < 100 else "%.0f" % value) if isinstance(value, float) else str(value)
        print("| %s | %s | %s | %s |" % (scenario, metric, label, shown))
    print("\n%s, %d cores" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count()))


if __name__ == "__main__":
    main()
