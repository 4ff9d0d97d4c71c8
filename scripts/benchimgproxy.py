#!/usr/bin/env python3
"""imgproxy's own benchmark scene (imgproxy/image-servers-benchmark), here: thumbd beside
thumbor, every peer with its shipped settings.

The scene as imgproxy publishes it: a 2040x1356 JPEG photo, fit into 512x512, JPEG quality
80, progressive; 2 clients at once; every request processed afresh (no result cache). On
2 vCPUs it published imgproxy 79.6 req/s against thumbor 51.6 (1.54x). imgproxy itself
cannot run here; thumbor can, so thumbor is the bridge.

Here every request names a new origin URL (the original is fetched, checked and stored,
then the thumbnail made), so neither server answers from its cache. The photo is made with
libvips (gradients, noise and a blur, so it compresses like a photo). Rounds alternate the
servers; each round is `--requests` requests (120) by 2 clients, and measures the floor
(libvips in this process) too. A ratio is the median of each round's ratio, with their
spread: a round of 60 lasted about a second, and this machine's speed moved the same build's
ratio from 1.22 to 1.79 over six runs of 3 rounds. Beside req/s, the server's CPU per
image (all its processes), which moves less than wall time here.

thumbd: /thumb?url=…&w=512&h=512&fit=inside&format=jpeg&q=80&progressive=1
thumbor: /unsafe/fit-in/512x512/filters:quality(80)/… (PROGRESSIVE_JPEG is on by default)
"""
import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchpeers import Origin, Thumbd, cpu_seconds, get  # noqa: E402
from benchthumbor import Thumbor  # noqa: E402
from benchthumbs import photo, within_rounds  # noqa: E402

PUBLISHED = {"imgproxy": 79.6, "thumbor": 51.6}  # req/s on 2 vCPUs, imgproxy's README


def thumbd_path(server, tag):
    return server.path("/file/scene.jpg/%s" % tag) + "&w=512&h=512&fit=inside&format=jpeg&q=80&progressive=1"


def thumbor_path(server, tag):
    return "/unsafe/fit-in/512x512/filters:quality(80)/127.0.0.1:%d/file/scene.jpg/%s" % (server.origin.port, tag)


def one_round(server, paths, clients=2):
    """`paths` by `clients` at once: (req/s, server CPU ms per image)."""
    queue = list(paths)

    async def client():
        while queue:
            path = queue.pop()
            status, size = await get(server.port, path)
            if status != 200 or size == 0:
                raise RuntimeError("%s: %s answered %d" % (server.name, path[:80], status))

    async def run():
        await asyncio.gather(*(client() for _ in range(clients)))

    before = cpu_seconds(server.pids)
    started = time.monotonic()
    asyncio.run(run())
    wall = time.monotonic() - started
    return len(paths) / wall, (cpu_seconds(server.pids) - before) * 1000 / len(paths)


def floor_cpu_ms(data, runs=20):
    """libvips in this process, one thread, doing the loader's steps on bytes in memory: the
    JPEG decoded at the largest shrink libvips's loader offers that keeps at least 512 px
    (1/2: 1020x678), fit into 512x512, progressive JPEG q80 without metadata. What a server
    built on libvips's loader cannot go below; thumbd decodes this photo at libjpeg's 3/8
    (765x509) instead, so it can spend less."""
    import pyvips
    width = pyvips.Image.new_from_buffer(data, "").width
    shrink = next((s for s in (8, 4, 2) if width / 512 >= s), 1)
    started = time.process_time()
    for _ in range(runs):
        image = pyvips.Image.jpegload_buffer(data, shrink=shrink, access="sequential")
        image.thumbnail_image(512, height=512).jpegsave_buffer(Q=80, strip=True, interlace=True)
    return (time.process_time() - started) * 1000 / runs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--thumbd", required=True)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--requests", type=int, default=120)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="thumbd-imgproxy-")
    files = os.path.join(work, "files")
    os.makedirs(files)
    data = photo(2040, 1356)
    with open(os.path.join(files, "scene.jpg"), "wb") as f:
        f.write(data)
    floors = []
    os.environ["BENCH_FILES"] = files
    origin = Origin()
    servers = []
    results = {}
    try:
        thumbd = Thumbd(os.path.abspath(args.thumbd), origin, work)
        servers = [thumbd, Thumbor(origin, work, 1), Thumbor(origin, work, os.cpu_count() or 2)]
        for server in servers:
            results[server.name] = []
            path = thumbd_path if server is thumbd else thumbor_path
            one_round(server, [path(server, "warm-%d" % i) for i in range(4)])  # first-use costs
        print("benchimgproxy: %s; %d rounds of %d requests, 2 clients" % (
            ", ".join("%s :%d" % (s.name, s.port) for s in servers), args.rounds, args.requests), file=sys.stderr)
        for r in range(args.rounds):
            order = servers if r % 2 == 0 else list(reversed(servers))
            floors.append(floor_cpu_ms(data))
            for server in order:
                path = thumbd_path if server is thumbd else thumbor_path
                results[server.name].append(one_round(server, [path(server, "r%d-%d" % (r, i)) for i in range(args.requests)]))
                print("  %-10s %.1f req/s, %.1f ms CPU an image" % ((server.name,) + results[server.name][-1]),
                      file=sys.stderr, flush=True)
    finally:
        for server in servers:
            server.stop()
        origin.stop()
        shutil.rmtree(work, ignore_errors=True)

    def median(name, i):
        return statistics.median(row[i] for row in results[name])

    best = max((name for name in results if name != "thumbd"), key=lambda name: median(name, 0))
    floor = statistics.median(floors)

    def against(name, i):
        return within_rounds([row[i] for row in results["thumbd"]], [row[i] for row in results[name]])

    print()
    print("### imgproxy's scene: 2040x1356 JPEG, fit 512x512, JPEG q80 progressive, 2 clients, every request a new "
          "origin URL (median of %d rounds of %d)" % (args.rounds, args.requests))
    print()
    print("| server | req/s | spread | CPU ms per image | thumbd / it: req/s, each round's | CPU, each round's |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in results:
        rates = [row[0] for row in results[name]]
        print("| %s | %.1f | %.1f–%.1f | %.1f | %s | %s |" % (name, median(name, 0), min(rates), max(rates), median(name, 1),
                                                             against(name, 0), against(name, 1)))
    ratio = statistics.median(a[0] / b[0] for a, b in zip(results["thumbd"], results[best]))
    print()
    print("thumbd / %s (the faster thumbor): %s (target 1.3). By imgproxy's published ratio (%.1f / %.1f), "
          "thumbd is about %.2f of imgproxy on this scene (a bridge, not a measurement of imgproxy)." % (
              best, against(best, 0), PUBLISHED["imgproxy"], PUBLISHED["thumbor"],
              ratio * PUBLISHED["thumbor"] / PUBLISHED["imgproxy"]))
    cores = os.cpu_count() or 2

    def to_floor(name):
        return within_rounds([row[1] for row in results[name]], floors)

    print()
    print("The floor: libvips in-process doing the loader's steps (JPEG at 1/2) spends %.1f ms of CPU an image, so %d cores make at "
          "most %.0f images a second that way; thumbd spends %s that (fetch, check, store, HTTP included), %s %s "
          "(each round's ratio). The most thumbd could be ahead of %s at full CPU is about %.2fx." % (
              floor, cores, cores * 1000 / floor, to_floor("thumbd"), best, to_floor(best), best,
              median(best, 1) / median("thumbd", 1)))
    print("\n%s, %d cores" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count()))


if __name__ == "__main__":
    main()
