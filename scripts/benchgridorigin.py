#!/usr/bin/env python3
"""The grid bench's origin: the photos (made here with libvips, each distinct) served with
60 ms of latency before each answer and ~4 MB/s per connection, in a process of its own,
with the ETag and Last-Modified a static file server (nginx) sends.

  benchgridorigin.py DIR    prints "PORT n", serves DIR until its stdin closes
"""
import email.utils
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

LATENCY = 0.060
RATE = 4 << 20  # bytes per second per connection


def serve_origin(directory):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    files = {}  # read once, on first ask (pages are written while it runs)
    stamps = {}  # their modification times

    def read(name):
        if name not in files:
            try:
                with open(os.path.join(directory, os.path.basename(name)), "rb") as f:
                    body = f.read()
            except OSError:
                return None
            if name.endswith(".html"):
                return body
            files[name] = body
            stamps[name] = int(os.stat(os.path.join(directory, os.path.basename(name))).st_mtime)
        return files[name]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            name = urllib.parse.urlsplit(self.path).path.rsplit("/", 1)[-1]
            body = read(name)
            if not name.endswith(".html"):
                time.sleep(LATENCY)  # the photos' origin is far; the pages are served at once
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8" if name.endswith(".html") else "image/jpeg")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store" if name.endswith(".html") else "max-age=86400")
            if not name.endswith(".html"):  # the validators a static file server sends (nginx's ETag)
                self.send_header("ETag", '"%x-%x"' % (stamps[name], len(body)))
                self.send_header("Last-Modified", email.utils.formatdate(stamps[name], usegmt=True))
            self.end_headers()
            # ~RATE per connection: 64 KB, then the pause that keeps it to the rate.
            chunk = 64 << 10
            started = time.monotonic()
            try:
                for offset in range(0, len(body), chunk):
                    self.wfile.write(body[offset:offset + chunk])
                    ahead = (offset + chunk) / RATE - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)
            except OSError:
                pass

    class Server(ThreadingHTTPServer):
        """A thread per connection, as ThreadingHTTPServer, but started ahead: starting one
        per accept (the new thread must take the GIL before the accept loop goes on) let a
        client that opens 28 connections at once wait up to 0.1 s for its last handler on
        two busy cores, a delay no remote origin adds."""
        daemon_threads = True
        request_queue_size = 1024
        spare = 256

        def __init__(self, *args):
            super().__init__(*args)
            self.jobs = queue.SimpleQueue()
            self.lock = threading.Lock()
            self.idle = 0
            for _ in range(self.spare):
                self.start_worker()

        def start_worker(self, taken=False):
            threading.Thread(target=self.work, args=(taken,), daemon=True).start()

        def work(self, taken):
            while True:
                if not taken:  # one started for a connection already counted it
                    with self.lock:
                        self.idle += 1
                taken = False
                request, client_address = self.jobs.get()
                self.process_request_thread(request, client_address)

        def process_request(self, request, client_address):
            with self.lock:
                busy = self.idle == 0
                if not busy:
                    self.idle -= 1
            if busy:
                self.start_worker(taken=True)  # every kept-alive connection holds one
            self.jobs.put((request, client_address))

        def handle_error(self, request, client_address):
            pass  # a browser closing its kept-alive connections when it exits

    server = Server(("127.0.0.1", 0), Handler)
    print("PORT %d" % server.server_address[1], flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    server.serve_forever()


class Origin:
    def __init__(self, directory):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), directory],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline().split()[1])

    def url(self, name):
        return "http://127.0.0.1:%d/%s" % (self.port, name)

    def stop(self):
        self.proc.stdin.close()
        self.proc.terminate()
        self.proc.wait()


def make_photos(directory, big, small):
    """Distinct photo-like JPEGs: gradients and noise (a new noise each), blurred a little."""
    import pyvips
    names = []
    for index in range(big + small):  # interleaved: even tiles big, odd tiles small
        width, height = (4000, 3000) if (index % 2 == 0 and index // 2 < big) or index >= 2 * small else (1200, 800)
        name = "photo-%03d-%dx%d.jpg" % (index, width, height)
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            xyz = pyvips.Image.xyz(width, height)
            red = xyz[0] * (255.0 / width)
            green = xyz[1] * (255.0 / height)
            blue = pyvips.Image.gaussnoise(width, height, sigma=60, mean=128 + index % 40)
            image = red.bandjoin([green, blue]).gaussblur(1.5).cast("uchar").copy(interpretation="srgb")
            image.jpegsave(path, Q=90)
        names.append(name)
    return names


def floors(origin, names, rounds):
    """What no page can beat here: one 4000x3000 original over one connection (the origin's
    latency and rate), and libvips's CPU for a 160 px tile of each size of photo (decode with
    shrink-on-load, resize, encode: pyvips in-process, one thread): {size: seconds}."""
    import pyvips
    from benchgridpages import TILE
    pyvips.concurrency_set(1)
    downloads, cpu = [], {}
    for size in ("4000x3000", "1200x800"):
        name = next(n for n in names if size in n)
        cpu[size] = []
        for _ in range(rounds):
            started = time.monotonic()
            with urllib.request.urlopen(origin.url(name)) as r:
                body = r.read()
            if size == "4000x3000":
                downloads.append(time.monotonic() - started)
            started = time.process_time()
            pyvips.Image.thumbnail_buffer(body, TILE, height=TILE, crop="centre").jpegsave_buffer(Q=80)
            cpu[size].append(time.process_time() - started)
    return statistics.median(downloads), {size: statistics.median(values) for size, values in cpu.items()}


def screen_cpu(tiles, tile_cpu, names):
    """libvips's CPU for a screen's `tiles`: each tile's, by the size of its photo."""
    return sum(tile_cpu["4000x3000" if "4000x3000" in names[i] else "1200x800"] for i in tiles)


def cpu_line(rows, cores, named, direct, tile_cpu, names):
    """What the page's cold first screen waited for, from its POST (`named`): the CPU the
    browser, thumbd and the rest (the origin, this bench) took meanwhile, medians of `rows`;
    and the floor that sets: the browser's CPU and libvips's for the screen's tiles, on every
    core. thumbd's CPU beside libvips's for those tiles is what thumbd adds to the screen."""
    windows = [row["cpu_first"] for row in rows if row.get("cpu_first")]
    if not windows:
        return
    busy, browser, server, rest, steal = (statistics.median(w.get(k, 0) for w in windows)
                                          for k in ("busy", "browser", "server", "rest", "steal"))
    work = screen_cpu(rows[0]["first_indices"], tile_cpu, names)
    floor = named + (browser + work) / cores
    print("From its POST to its first screen, the %d cores were %.0f%% busy and %.0f%% taken by other machines (steal): "
          "the browser took %.2f s of CPU, thumbd %.2f s (%.2f times libvips's for the screen's tiles, %.2f s), the rest "
          "(the origin, this bench) %.2f s. The browser's CPU and libvips's for the screen's tiles, spread over the cores, "
          "end no sooner than %.2f s: %.2f of the direct page's (medians of %d)." % (
              cores, busy * 100, steal * 100, browser, server, server / work if work else float("nan"), work, rest,
              floor, floor / direct, len(windows)))


if __name__ == "__main__":
    serve_origin(sys.argv[1])
