#!/usr/bin/env python3
"""The soak of scripts/bench: thumbd with its shipped settings for a few minutes of mixed
traffic, bounded in time, loopback only.

32 clients at once, each picking at random:
  55%  a hit: one of 200 warmed images (its bytes checked against the origin's);
  15%  a thumbnail of one of them (w=4);
  20%  a miss: a new image, from an origin whose answers are 5% faulty (a 503, a body cut
       short, or bytes that are not an image);
  10%  a batch of 10 new images (same origin) with a subscriber that reads its stream to
       the end.
Expected errors are the faults' own: 502 upstream_status, 502 upstream_truncated and 415
not_an_image, on misses and batch items only. Anything else (a 5xx on a hit, another code,
a body that differs from the origin's, a stream without end) is unexpected. RSS and open
files of thumbd are read at minute one and at the end, under load and quiet (the clients
wait a moment and nothing is in flight).

    benchsoak.py --thumbd BIN [--seconds 180]
"""
import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import realimage  # noqa: E402
from benchpeers import Origin, free_port, wait_port  # noqa: E402

EXPECTED_FAULTS = {(502, "upstream_status"), (502, "upstream_truncated"), (415, "not_an_image")}
WARM = 200


def size_of(i):
    return 4096 + (i * 7919) % 28672  # 4–32 KB


async def request(port, method, target, body=b"", headers=()):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: %d\r\n" % (method, target, len(body))
    head += "".join("%s: %s\r\n" % h for h in headers)
    writer.write(head.encode() + b"\r\n" + body)
    await writer.drain()
    raw = await reader.readuntil(b"\r\n\r\n")
    status = int(raw.split(b" ", 2)[1])
    length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", raw)
    error = re.search(rb"(?i)\r\nx-thumbd-error:\s*([a-z_]+)", raw)
    data = await reader.readexactly(int(length.group(1))) if length else await reader.read()
    writer.close()
    return status, (error.group(1).decode() if error else None), data


async def events(port, path):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n" % path).encode())
    await writer.drain()
    text = b""
    while b"event: end" not in text:
        chunk = await asyncio.wait_for(reader.read(65536), 60)
        if not chunk:
            break
        text += chunk
    writer.close()
    return text.decode(errors="replace")


class Tally:
    def __init__(self):
        self.kinds = {}
        self.outcomes = {}
        self.unexpected = []
        self.mismatched = 0

    def count(self, kind, status, code):
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        key = "%d %s" % (status, code or "")
        self.outcomes[key.strip()] = self.outcomes.get(key.strip(), 0) + 1

    def bad(self, what):
        if len(self.unexpected) < 20:
            self.unexpected.append(what)
        else:
            self.unexpected.append("…")


class Pause:
    """Lets the sampler stop the clients for a moment: a client waits at `gate` before each
    request, and `busy` counts the requests in flight."""
    def __init__(self):
        self.gate = asyncio.Event()
        self.gate.set()
        self.busy = 0


async def client(port, origin, tally, deadline, counter, pause):
    def thumb(path, extra=""):
        return "/thumb?url=" + urllib.parse.quote(origin.url(path), safe="") + extra

    while time.monotonic() < deadline:
        await pause.gate.wait()
        pause.busy += 1
        pick = random.random()
        try:
            if pick < 0.55 or pick < 0.70:
                i = random.randrange(WARM)
                path = "/img/soak-hot-%d.jpg?size=%d" % (i, size_of(i))
                kind = "hit" if pick < 0.55 else "thumbnail"
                status, code, data = await request(port, "GET", thumb(path, "&w=4" if kind == "thumbnail" else ""))
                tally.count(kind, status, code)
                if status != 200:
                    tally.bad("%s %s: %d %s" % (kind, path, status, code))
                elif kind == "hit" and data != realimage.jpeg("bench", size_of(i)):
                    tally.mismatched += 1
            elif pick < 0.90:
                n = next(counter)
                path = "/img/soak-miss-%d.jpg?size=%d&fault=5" % (n, size_of(n))
                status, code, data = await request(port, "GET", thumb(path))
                tally.count("miss", status, code)
                if status == 200:
                    if data != realimage.jpeg("bench", size_of(n)):
                        tally.mismatched += 1
                elif (status, code) not in EXPECTED_FAULTS:
                    tally.bad("miss %s: %d %s" % (path, status, code))
            else:
                items = []
                for _ in range(10):
                    n = next(counter)
                    items.append(origin.url("/img/soak-batch-%d.jpg?size=%d&fault=5" % (n, size_of(n))))
                status, code, data = await request(port, "POST", "/batches", json.dumps({"urls": items}).encode(),
                                                   [("Content-Type", "application/json")])
                tally.count("batch", status, code)
                if status != 201:
                    tally.bad("batch: %d %s" % (status, code))
                    continue
                stream = await events(port, json.loads(data)["events"])
                if "event: end" not in stream:
                    tally.bad("a batch stream ended without end")
                for failure in re.findall(r"event: failed\ndata: (.*)", stream):
                    item = json.loads(failure)
                    if (item.get("status"), item.get("error")) not in EXPECTED_FAULTS:
                        tally.bad("batch item: %s" % failure)
                tally.kinds["batch item"] = tally.kinds.get("batch item", 0) + 10
        except Exception as error:  # a reset or a timeout is unexpected too
            tally.bad("%s: %r" % ("client", error))
        finally:
            pause.busy -= 1


def socket_ports(pid):
    """Socket inode -> local TCP port, from the process's view of /proc/net."""
    ports = {}
    for table in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    ports[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
        except OSError:
            pass
    return ports


def process_levels(pid, port=None):
    """RSS MB, open files, open files other than sockets (the database, the WAL, pipes,
    epoll and event fds: what a leak of thumbd's own handles would grow), the server's
    sockets (listening, and the clients' connections: mostly the requests in flight at that
    instant) and the others (connections to the origin, in flight or kept for reuse), and
    RSS split into the process's own memory (anonymous) and mapped files (the binary and its
    libraries, page cache the kernel can take back). The sockets are told apart only when
    `port` (the server's) is given: /proc/net/tcp lists every socket of the machine,
    thousands in TIME_WAIT under this load, too slow to read five times a second."""
    with open("/proc/%d/status" % pid) as f:
        status = {line.split(":")[0]: line.split()[1] for line in f if line.startswith(("VmRSS:", "RssAnon:", "RssFile:"))}
    rss = int(status["VmRSS"]) / 1024
    ports = None
    fds = other = served = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue  # closed meanwhile
        fds += 1
        if not target.startswith("socket:"):
            other += 1
            continue
        if port is not None:
            if ports is None:
                ports = socket_ports(pid)
            if ports.get(target[len("socket:["):-1]) == port:
                served += 1
    upstream = fds - other - served if port is not None else None
    return rss, fds, other, int(status["RssAnon"]) / 1024, int(status["RssFile"]) / 1024, served, upstream


async def quiet_levels(pid, port, pause):
    """The levels with nothing in flight: the clients wait, their requests finish, and a
    second later (background refreshes, store writes) the levels are read; then the clients
    go on. Under load the open files are mostly the sockets of the requests in flight, which
    move by a third from one second to the next; quiet, they are what the daemon keeps."""
    pause.gate.clear()
    waited = time.monotonic() + 60
    while pause.busy and time.monotonic() < waited:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    levels = process_levels(pid, port)
    pause.gate.set()
    return levels


async def soak(port, origin, pid, seconds, tally):
    """Levels are sampled five times a second under load; minute one and the end are each
    the median of their last 15 seconds (one sample catches whatever connections happen to
    be open at that instant). They are read quiet, too (`quiet_levels`): once at minute one,
    and once after the load."""
    import itertools
    import statistics
    counter = itertools.count()
    start = time.monotonic()
    deadline = start + seconds
    minute_one = min(60, seconds / 3)
    pause = Pause()
    workers = [asyncio.ensure_future(client(port, origin, tally, deadline, counter, pause)) for _ in range(32)]
    samples = []
    next_course = 10
    quiet_one = None
    while time.monotonic() < deadline - 0.2:
        await asyncio.sleep(0.2)
        samples.append((time.monotonic() - start, process_levels(pid)))
        if quiet_one is None and samples[-1][0] >= minute_one:
            quiet_one = await quiet_levels(pid, port, pause)
            print("bench: soak at %3.0f s, quiet: RSS %.1f MB, %d open files (%d not sockets, %d server sockets, %d upstream)" % (
                samples[-1][0], quiet_one[0], quiet_one[1], quiet_one[2], quiet_one[5], quiet_one[6]), file=sys.stderr)
        if samples[-1][0] >= next_course:  # the course, to tell a climb from a step
            next_course += 10
            at = samples[-1][0]
            rss, fds, other, anonymous, mapped, served, upstream = process_levels(pid, port)
            print("bench: soak at %3.0f s: RSS %.1f MB (anonymous %.1f, file %.1f), %d open files "
                  "(%d not sockets, %d server sockets, %d upstream)" % (
                      at, rss, anonymous, mapped, fds, other, served, upstream), file=sys.stderr)
    await asyncio.gather(*workers)
    idle = await quiet_levels(pid, port, pause)

    def around(t):
        window = [levels for at, levels in samples if t - 15 < at <= t]
        return tuple(statistics.median(levels[i] for levels in window) for i in (0, 1, 2))
    return minute_one, around(minute_one), around(seconds), quiet_one, idle, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--thumbd", required=True)
    parser.add_argument("--seconds", type=int, default=180)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="thumbd-soak-")
    with open(os.path.join(work, "empty.yaml"), "w") as f:
        f.write("{}\n")
    origin = Origin()
    port = free_port()
    env = dict(os.environ, THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS="true", THUMBD_LOG_LEVEL="warning")
    proc = subprocess.Popen([os.path.abspath(args.thumbd), "serve", "--listen", "127.0.0.1:%d" % port,
                             "--db", os.path.join(work, "soak.sqlite"), "--config", os.path.join(work, "empty.yaml")],
                            env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "thumbd.err"), "w"))
    tally = Tally()
    try:
        wait_port(port)

        async def warm():
            for i in range(WARM):
                status, _, _ = await request(port, "GET", "/thumb?url=" + urllib.parse.quote(
                    origin.url("/img/soak-hot-%d.jpg?size=%d" % (i, size_of(i))), safe=""))
                assert status == 200, status
        asyncio.run(warm())
        print("bench: soak, %d s, 32 clients" % args.seconds, file=sys.stderr)
        minute_one, first, last, quiet_one, idle, elapsed = asyncio.run(soak(port, origin, proc.pid, args.seconds, tally))
        alive = proc.poll() is None
        faults = origin.stats().get("faults", {})
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        origin.stop()
        shutil.rmtree(work, ignore_errors=True)

    served = sum(v for k, v in tally.kinds.items() if k != "batch item")
    print("| soak, %d s, 32 clients, thumbd's shipped settings | value |" % round(elapsed))
    print("|---|---:|")
    print("| requests answered | %d (%.0f/s) |" % (served, served / elapsed))
    for kind in ("hit", "thumbnail", "miss", "batch", "batch item"):
        print("| … %s | %d |" % (kind, tally.kinds.get(kind, 0)))
    print("| origin faults injected (503 / cut short / not an image) | %d / %d / %d |" % (
        faults.get("status", 0), faults.get("truncated", 0), faults.get("garbage", 0)))
    for outcome in sorted(tally.outcomes):
        if not outcome.startswith("200") and not outcome.startswith("201"):
            print("| answers %s | %d |" % (outcome, tally.outcomes[outcome]))
    print("| unexpected answers or errors | %d |" % len([u for u in tally.unexpected if u != "…"]))
    print("| bodies that differ from the origin's | %d |" % tally.mismatched)
    def change(a, b):
        return "%s / %s (%+.1f%%)" % (a, b, (b / a - 1) * 100)
    print("| RSS MB under load at %.0f s / at the end (change) | %s |" % (
        minute_one, change(round(first[0], 1), round(last[0], 1))))
    print("| RSS MB quiet at %.0f s / after the load (change) | %s |" % (
        minute_one, change(round(quiet_one[0], 1), round(idle[0], 1))))
    print("| open files under load at %.0f s / at the end (change) | %s |" % (minute_one, change(first[1], last[1])))
    print("| open files quiet at %.0f s / after the load (change) | %s |" % (minute_one, change(quiet_one[1], idle[1])))
    print("| … other than sockets, quiet at %.0f s / after the load (change) | %s |" % (
        minute_one, change(quiet_one[2], idle[2])))
    print("| … the server's sockets (listening, clients), quiet at %.0f s / after the load (change) | %s |" % (
        minute_one, change(quiet_one[5], idle[5])))
    print("| … upstream connections kept for reuse, quiet at %.0f s / after the load | %d / %d |" % (
        minute_one, quiet_one[6], idle[6]))
    print("| daemon still running at the end | %s |" % ("yes" if alive else "NO"))
    for line in tally.unexpected[:20]:
        print("unexpected: %s" % line, file=sys.stderr)


if __name__ == "__main__":
    main()
