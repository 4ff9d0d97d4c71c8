"""Instructions per answer, counted by valgrind's callgrind, for scripts/benchrelease.py: a
cost that does not move with the machine's clock, load or neighbours, where `perf stat` has
no instruction counter (many virtual machines, this one among them).

callgrind runs thumbd on a simulated CPU and counts every instruction its threads execute in
user space: thumbd's own code and every library's (libmicrohttpd, SQLite, libcurl, libvips,
libc). It does not count the kernel's work (the system calls, loopback TCP), and it counts
a `rep stos`/`rep movs` once per iteration, so memset and memcpy weigh more here than in
seconds. The same build given the same requests counts the same within about 0.2%: one
count per build is a figure, and a 1% change between two builds is real.

The count starts after the build has served its warm-up, and covers only the requests
measured: callgrind's instrumentation is switched on, a dump marks the start, and the dump
after the requests holds their instructions (`callgrind_control`).

valgrind 3.19 (Debian 12) cannot read the DWARF 5 that Swift's clang writes, so it runs a
copy of the binary without its debug sections (`objcopy --strip-debug`): the same code, and
its symbols stay for `callgrind_annotate`.
"""
import asyncio
import glob
import http.client
import os
import re
import signal
import subprocess
import time

from benchpeers import free_port, get, wait_port


class Callgrind:
    """One thumbd under callgrind."""

    def __init__(self, binary, origin, work, name):
        self.origin = origin
        self.port = free_port()
        stripped = os.path.join(work, name + ".nodebug")
        subprocess.run(["objcopy", "--strip-debug", binary, stripped], check=True)
        config = os.path.join(work, "empty.yaml")
        if not os.path.exists(config):
            with open(config, "w") as f:
                f.write("{}\n")
        self.out = os.path.join(work, name + ".callgrind")
        # The shipped settings, but for the loopback origin and two time limits: on
        # callgrind's simulated CPU, 20 to 50 times slower, a 4000x3000 resize can pass the
        # 10 s `thumbnails.timeLimitSeconds` (a 503). The instructions run are the same.
        env = dict(os.environ, THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS="true", THUMBD_LOG_LEVEL="warning",
                   THUMBD_THUMBNAILS_TIME_LIMIT_SECONDS="600", THUMBD_UPSTREAM_LOW_SPEED_SECONDS="120")
        # --smc-check=all: liborc writes the code libvips runs into a file it maps twice, and
        # reuses addresses, which valgrind's default check (code outside files) would miss.
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--smc-check=all", "--callgrind-out-file=" + self.out,
             stripped, "serve", "--listen", "127.0.0.1:%d" % self.port, "--db", os.path.join(work, name + ".sqlite"),
             "--config", config],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(self.port, timeout=120)
            self.control("-i", "on")
        except Exception:
            self.proc.kill()
            self.proc.wait()
            raise

    def path(self, origin_path):
        import urllib.parse
        return "/thumb?url=" + urllib.parse.quote(self.origin.url(origin_path), safe="")

    def control(self, *args):
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def dump(self, timeout=120):
        """Asks for a dump and returns its instruction count (callgrind writes it when a
        thread next runs, so the file is waited for)."""
        before = set(glob.glob(self.out + ".*"))
        self.control("-d")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for path in set(glob.glob(self.out + ".*")) - before:
                with open(path) as f:
                    match = re.search(r"^totals:\s+(\d+)", f.read(), re.M)
                if match:
                    return int(match.group(1))
            time.sleep(0.05)
        raise RuntimeError("callgrind wrote no dump in %d s" % timeout)

    def count(self, requests, settle=0.0):
        """Instructions that `requests()` cost thumbd, from a dump before to a dump after;
        `settle` seconds after the last answer, for the work that follows it (a cold
        thumbnail's original and tile are stored after they are answered)."""
        self.dump()
        requests()
        time.sleep(settle)
        return self.dump()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def sequential(server, paths):
    """Each path in turn over one keep-alive connection; every answer must be 200."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        for path in paths:
            connection.request("GET", path)
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError("%s answered %d" % (path, answer.status))
    finally:
        connection.close()


HOT_REQUESTS = 2000
COLD_THUMBNAILS = 4


def counted_scenes(builds, origin, work, hot_path, runs=2):
    """{build: [(hot instructions per answer, cold instructions per thumbnail)] * runs}, the
    builds taking turns; each run is a new daemon and cache."""
    results = {build: [] for build in builds}
    for run in range(runs):
        for build in builds if run % 2 == 0 else list(reversed(builds)):
            name = "counted-%s-%d" % (re.sub(r"\W", "-", build[0]), run)
            server = Callgrind(build[1], origin, work, name)
            try:
                asyncio.run(get(server.port, server.path(hot_path)))
                sequential(server, [server.path(hot_path)] * 100)  # warm: the first answers fill pools
                hot = server.count(lambda: sequential(server, [server.path(hot_path)] * HOT_REQUESTS))
                cold_paths = [server.path("/file/big.jpg/counted-%s-%d" % (name, i)) + "&w=256&q=80"
                              for i in range(COLD_THUMBNAILS)]
                sequential(server, [server.path("/file/big.jpg/counted-warm-%s" % name) + "&w=256&q=80"])
                cold = server.count(lambda: sequential(server, cold_paths), settle=3)
            finally:
                server.stop()
            results[build].append((hot / HOT_REQUESTS, cold / COLD_THUMBNAILS))
    return results


FLOOR = """
import sys
import pyvips
data = open(sys.argv[1], "rb").read()
width = pyvips.Image.new_from_buffer(data, "").width
shrink = next((s for s in (8, 4, 2) if width / 256 >= s), 1)
for _ in range(int(sys.argv[2])):
    image = pyvips.Image.jpegload_buffer(data, shrink=shrink, access="sequential")
    image.thumbnail_image(256).jpegsave_buffer(Q=80, strip=True)
"""


def floor_instructions(path, work):
    """libvips in one Python process doing thumbd's steps on the file `path` (the JPEG
    decoded at thumbd's shrink, thumbnail_image to width 256, JPEG Q 80 without metadata), counted
    as thumbd's cold thumbnails are: instructions per thumbnail, the difference between runs
    of 1 and 1 + COLD_THUMBNAILS thumbnails (which leaves Python's start and libvips's first
    use out)."""
    counts = []
    for n in (1, 1 + COLD_THUMBNAILS):
        out = os.path.join(work, "floor-%d.callgrind" % n)
        subprocess.run(["valgrind", "--tool=callgrind", "--smc-check=all", "--callgrind-out-file=" + out,
                        "python3", "-c", FLOOR, path, str(n)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            counts.append(int(re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M).group(1)))
    return (counts[1] - counts[0]) / COLD_THUMBNAILS
