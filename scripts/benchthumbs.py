#!/usr/bin/env python3
"""Thumbnails, in one run: thumbd beside thumbor (PyPI, file storage + result storage, one
process and one per core) and beside libvips itself in one process (pyvips: the floor).

Images are made here with libvips: a 4000x3000 and a 1200x800 photo-like JPEG (gradients,
noise and a blur, so they compress like photos, not flat colour), served by
scripts/benchorigin.py. Width 256, JPEG quality 80 everywhere. Every peer runs with the
settings it ships with; thumbor's are the ones its docs give for this job (see THUMBOR_CONF).
A thumbd/peer figure with a spread, "1.07 (1.02–1.12)", was measured in alternated rounds:
the median of each round's ratio, and the lowest and highest.
"""
import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

import pyvips

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchpeers import Origin, Thumbd, cpu_seconds, wrk, proc_status, get  # noqa: E402
from benchthumbor import QUALITY, WIDTH, Thumbor  # noqa: E402
from benchfloors import floor_cpu_ms, floor_ms, same_work_cpu_ms, stored_work_cpu_ms  # noqa: E402


def photo(width, height):
    """A photo-like JPEG: two gradients and noise, blurred a little."""
    xyz = pyvips.Image.xyz(width, height)
    red = xyz[0] * (255.0 / width)
    green = xyz[1] * (255.0 / height)
    blue = pyvips.Image.gaussnoise(width, height, sigma=60, mean=128)
    image = red.bandjoin([green, blue]).gaussblur(1.5).cast("uchar").copy(interpretation="srgb")
    return image.jpegsave_buffer(Q=90)


def animation(width, height, frames):
    """An animated GIF of photo-like frames (gradients and noise, each frame shifted), 80 ms
    each: it compresses like a real one, not like flat colour."""
    xyz = pyvips.Image.xyz(width, height)
    pages = []
    for i in range(frames):
        red = (xyz[0] + i * 7) * (255.0 / (width + frames * 7))
        green = xyz[1] * (255.0 / height)
        blue = pyvips.Image.gaussnoise(width, height, sigma=30, mean=128)
        pages.append(red.bandjoin([green, blue]).cast("uchar"))
    image = pyvips.Image.arrayjoin(pages, across=1).copy(interpretation="srgb")
    image.set_type(pyvips.GValue.gint_type, "page-height", height)
    image.set_type(pyvips.GValue.array_int_type, "delay", [80] * frames)
    image.set_type(pyvips.GValue.gint_type, "loop", 0)
    return image.gifsave_buffer()


def frames_of(port, path):
    """The frame count, size in bytes and width of one answer (libvips reads every frame)."""
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=60) as answer:
        body = answer.read()
    animated = body[:3] == b"GIF" or (body[:4] == b"RIFF" and body[8:12] == b"WEBP")
    image = pyvips.Image.new_from_buffer(body, "", n=-1) if animated else pyvips.Image.new_from_buffer(body, "")
    return image.get("n-pages") if image.get_typeof("n-pages") else 1, len(body), image.width


def thumbd_path(thumbd, name, tag, extra="&w=%d&q=%d" % (WIDTH, QUALITY)):
    return thumbd.path("/file/%s/%s" % (name, tag)) + extra


async def timed(port, path):
    start = time.monotonic()
    status, _ = await get(port, path)
    return status, start, time.monotonic()


def sequential_ms(port, paths):
    """Median latency, one request at a time."""
    times = []
    for path in paths:
        status, start, end = asyncio.run(timed(port, path))
        if status != 200:
            raise RuntimeError("%s answered %d" % (path, status))
        times.append((end - start) * 1000)
    return statistics.median(times)


def per_second(port, paths, concurrency=8):
    """Completed requests per second with `concurrency` at once."""
    async def run():
        semaphore = asyncio.Semaphore(concurrency)

        async def one(path):
            async with semaphore:
                return await get(port, path)
        start = time.monotonic()
        results = await asyncio.gather(*(one(p) for p in paths))
        return results, time.monotonic() - start
    results, wall = asyncio.run(run())
    bad = [s for s, _ in results if s != 200]
    if bad:
        raise RuntimeError("%d of %d failed: %s" % (len(bad), len(paths), sorted(set(bad))))
    return len(paths) / wall


def stats(thumbd):
    import json
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d/stats" % thumbd.port) as r:
        return json.load(r)


def one_new_variant(thumbd, origin, name, clients=50):
    """50 clients ask at once for one new variant of an original not fetched yet."""
    before_origin = origin.stats()["requests"].get("/file/%s/shared" % name, 0)
    before = stats(thumbd)["thumbnails"]
    path = thumbd_path(thumbd, name, "shared", "&w=200&q=81")

    async def run():
        return await asyncio.gather(*(timed(thumbd.port, path) for _ in range(clients)))
    results = asyncio.run(run())
    ends = sorted(end for _, _, end in results)
    starts = min(start for _, start, _ in results)
    return {
        "origin requests": origin.stats()["requests"].get("/file/%s/shared" % name, 0) - before_origin,
        "resizes": stats(thumbd)["thumbnails"] - before,
        "max latency ms": (ends[-1] - starts) * 1000,
        "first to last answer ms": (ends[-1] - ends[0]) * 1000,
        "answered 200": sum(1 for s, _, _ in results if s == 200),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--thumbd", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-options", action="store_true", help="leave out animation and blur (a release without them)")
    args = parser.parse_args()
    runs = 6 if args.quick else 15
    work = tempfile.mkdtemp(prefix="thumbd-thumbs-")
    files = os.path.join(work, "files")
    os.makedirs(files)
    images = {"big.jpg": photo(4000, 3000), "small.jpg": photo(1200, 800), "anim.gif": animation(320, 240, 20)}
    for name, data in images.items():
        with open(os.path.join(files, name), "wb") as f:
            f.write(data)
    os.environ["BENCH_FILES"] = files
    origin = Origin()
    peers = []
    rows = []
    try:
        thumbd = Thumbd(os.path.abspath(args.thumbd), origin, work)
        peers = [thumbd, Thumbor(origin, work, 1), Thumbor(origin, work, os.cpu_count() or 2)]
        thumbors = peers[1:]
        print("benchthumbs: origin :%d, thumbd :%d, %s" % (
            origin.port, thumbd.port, ", ".join("%s :%d" % (p.name, p.port) for p in thumbors)), file=sys.stderr)
        for name, label in (("big.jpg", "4000x3000"), ("small.jpg", "1200x800")):  # anim.gif: below
            data = images[name]
            print("benchthumbs: %s" % label, file=sys.stderr)
            floor = floor_ms(data, runs)
            # Cold variant: the original is cached; each request is a new variant (q varies).
            asyncio.run(get(thumbd.port, thumbd_path(thumbd, name, "cached", "")))
            variant = sequential_ms(thumbd.port, [thumbd_path(thumbd, name, "cached", "&w=%d&q=%d" % (WIDTH, 60 + i))
                                                   for i in range(runs)])
            floor_q = floor_ms(data, runs)
            rows.append(("%s, cold variant (original cached), width 256" % label, "median ms",
                         variant, "libvips in-process", min(floor, floor_q)))
            # Cold thumbnail: original not cached, one at a time.
            cold = sequential_ms(thumbd.port, [thumbd_path(thumbd, name, "cold-%d" % i) for i in range(runs)])
            for peer in thumbors:
                other = sequential_ms(peer.port, [peer.path(name, "cold-%d" % i) for i in range(runs)])
                rows.append(("%s, cold thumbnail (original not cached)" % label, "median ms", cold, peer.name, other))
            # Cold thumbnails per second, 8 at once: rounds of about 1.5 s each (a round of 48
            # small images lasted 0.3 s, and moved by 10%), medians. Each round also measures
            # libvips in this process, so a ratio to it is taken within a round (the machine's
            # speed drifts between rounds and between days: one run of each moved a ratio from
            # 1.09 to 1.26), and the order alternates.
            count = (24 if args.quick else 48) * (4 if name == "small.jpg" else 1)
            servers = [thumbd] + thumbors
            floors = (("libvips in-process (floor)", lambda: floor_cpu_ms(data, 5)),
                      ("libvips in-process, thumbd's steps", lambda: same_work_cpu_ms(data, 5)),
                      ("the same, with the ETags and SQLite inserts a cache makes",
                       lambda: stored_work_cpu_ms(data, work, 5)),
                      ("the same, and the original received over loopback first",
                       lambda: stored_work_cpu_ms(data, work, 5, fetch=(origin.port, "/file/%s/floor" % name))))
            rates = {peer.name: [] for peer in servers}
            cpu = {name: [] for name in [peer.name for peer in servers] + [label for label, _ in floors]}
            for r in range(3 if args.quick else 5):
                steps = [(peer.name, peer) for peer in servers] + list(floors)
                for key, step in steps if r % 2 == 0 else reversed(steps):
                    if callable(step):
                        cpu[key].append(step())
                        continue
                    paths = ([thumbd_path(thumbd, name, "rate-%d-%d" % (r, i)) for i in range(count)] if step is thumbd
                             else [step.path(name, "rate-%d-%d" % (r, i)) for i in range(count)])
                    before = cpu_seconds(step.pids)
                    rates[key].append(per_second(step.port, paths))
                    cpu[key].append((cpu_seconds(step.pids) - before) * 1000 / count)
            rounds = len(rates[thumbd.name])
            rate = statistics.median(rates[thumbd.name])
            for peer in thumbors:
                rows.append(("%s, cold thumbnails, 8 at once (median of %d rounds of %d)" % (label, rounds, count),
                             "per second", rate, peer.name, statistics.median(rates[peer.name]),
                             within_rounds(rates[thumbd.name], rates[peer.name])))
            # CPU per thumbnail (fetch, decode, resize, encode, store): the server's processes
            # over the same rounds; the floors are libvips alone on bytes already in memory.
            thumbd_cpu = statistics.median(cpu[thumbd.name])
            for other in [peer.name for peer in thumbors] + [label for label, _ in floors]:
                rows.append(("%s, cold thumbnails, 8 at once" % label, "CPU ms per thumbnail", thumbd_cpu, other,
                             statistics.median(cpu[other]), within_rounds(cpu[thumbd.name], cpu[other])))
            # Hits: a variant beside the original (thumbd), and beside thumbor's result storage.
            seconds = 4 if args.quick else 8
            variant_hits = wrk(thumbd.port, [thumbd_path(thumbd, name, "cached")], seconds, work)[0]
            original_hits = wrk(thumbd.port, [thumbd_path(thumbd, name, "cached", "")], seconds, work)[0]
            rows.append(("%s, hits" % label, "variant req/s", variant_hits, "thumbd original req/s", original_hits))
            asyncio.run(get(thumbors[-1].port, thumbors[-1].path(name, "cached")))
            thumbor_hits = wrk(thumbors[-1].port, [thumbors[-1].path(name, "cached")], seconds, work)[0]
            rows.append(("%s, hits" % label, "variant req/s", variant_hits, thumbors[-1].name, thumbor_hits))
            # 50 clients, one new variant.
            for metric, value in one_new_variant(thumbd, origin, name).items():
                rows.append(("%s, 50 clients ask one new variant (original not cached)" % label, metric, value, "-", None))
        # Options: an animated source kept animated, and a blurred variant, one at a time,
        # each request a new original (fetch, decode, every frame, encode) for every server.
        print("benchthumbs: animation and blur", file=sys.stderr)
        for title, name, width, ours, theirs in () if args.no_options else (
                ("animated GIF 320x240, 20 frames, to width 160 (GIF out)", "anim.gif", 160, "&w=160", ""),
                ("animated GIF 320x240, 20 frames, to width 160 (WebP out)", "anim.gif", 160, "&w=160&format=webp",
                 "format(webp)"),
                ("1200x800 JPEG, width 256, gaussian blur sigma 5", "small.jpg", WIDTH, "&w=%d&q=%d&blur=5" % (WIDTH, QUALITY),
                 "blur(15,5)")):
            count = 4 if args.quick else 8
            mine = sequential_ms(thumbd.port, [thumbd_path(thumbd, name, "opt-%d-%s" % (i, width), ours + "&q=%d" % (60 + i))
                                               for i in range(count)])
            frames, size, made = frames_of(thumbd.port, thumbd_path(thumbd, name, "opt-0-%s" % width, ours + "&q=60"))
            for peer in thumbors:
                other = sequential_ms(peer.port, [peer.path(name, "opt-%d-%s-%s" % (i, width, theirs), width, theirs)
                                                  for i in range(count)])
                rows.append(("%s, new original each (median of %d)" % (title, count), "median ms", mine, peer.name, other))
            peer_frames, peer_size, peer_made = frames_of(thumbors[0].port, thumbors[0].path(name, "opt-0-%s-%s" % (width, theirs),
                                                                                  width, theirs))
            rows.append((title, "frames in the answer", frames, thumbors[0].name, peer_frames))
            rows.append((title, "bytes of the answer", size, thumbors[0].name, peer_size))
            rows.append((title, "width of the answer", made, thumbors[0].name, peer_made))
        # Memory through a burst of distinct big-image thumbnails.
        print("benchthumbs: memory", file=sys.stderr)
        peak = [0.0]

        async def burst():
            semaphore = asyncio.Semaphore(8)

            async def one(i):
                async with semaphore:
                    await get(thumbd.port, thumbd_path(thumbd, "big.jpg", "burst-%d" % i))
                    peak[0] = max(peak[0], proc_status(thumbd.pids)[1])
            await asyncio.gather(*(one(i) for i in range(200)))
        asyncio.run(burst())
        rows.append(("200 distinct big-image thumbnails, 8 at once", "peak RSS MB (sampled)", peak[0], "-", None))
    finally:
        for peer in peers:
            try:
                peer.stop()
            except Exception as error:
                print("benchthumbs: stopping %s: %s" % (peer.name, error), file=sys.stderr)
        origin.stop()
        shutil.rmtree(work, ignore_errors=True)

    print("| scenario | metric | thumbd | peer | peer's figure | thumbd/peer |")
    print("|---|---|---:|---|---:|---:|")
    for scenario, metric, value, peer, other, *within in rows:
        ratio = within[0] if within else "%.2f" % (value / other) if isinstance(other, (int, float)) and other else "-"
        print("| %s | %s | %s | %s | %s | %s |" % (scenario, metric, fmt(value), peer, fmt(other), ratio))
    import thumbor
    print("\n%s, %d cores, libvips %s (pyvips %s), thumbor %s" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), pyvips.version(0) and
        "%d.%d.%d" % (pyvips.version(0), pyvips.version(1), pyvips.version(2)), pyvips.__version__,
        getattr(thumbor, "__version__", "?")))


def within_rounds(mine, theirs):
    """The ratio of two figures measured in the same rounds: the median of each round's
    ratio, and their spread."""
    ratios = sorted(a / b for a, b in zip(mine, theirs) if b)
    return "%.2f (%.2f–%.2f)" % (statistics.median(ratios), ratios[0], ratios[-1]) if ratios else "-"


def fmt(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.0f" % value if abs(value) >= 100 else "%.2f" % value
    return str(value)


if __name__ == "__main__":
    main()
