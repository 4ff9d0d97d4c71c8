#!/usr/bin/env python3
"""Runs the scenarios of scripts/bench against thumbd and nginx (and Varnish where the
scenario is about expiry or a parent cache) in one run.

Both proxies sit in front of the same origin (scripts/testorigin.py). nginx gets the
configuration its users would write for this job: proxy_cache, proxy_cache_lock on,
upstream keep-alive, access_log off. Hot figures are the median of several wrk rounds.
"""
import argparse
import asyncio
import resource
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on %d" % port)


class Origin:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "benchorigin.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline().split()[1])

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def stats(self):
        with urllib.request.urlopen(self.url("/__stats")) as r:
            return json.load(r)

    def release(self, gate):
        urllib.request.urlopen(self.url("/__release/" + gate)).read()

    def stop(self):
        self.proc.stdin.close()
        self.proc.terminate()
        self.proc.wait()


class Thumbd:
    name = "thumbd"

    def __init__(self, binary, origin, work, name="thumbd", extra=None):
        self.binary = binary
        self.port = free_port()
        self.origin = origin
        self.name = name
        # thumbd's shipped settings (config/thumbd.yaml's defaults), but for two: the origin
        # is on loopback, which thumbd refuses by default; and the held-stream scenarios keep
        # origins silent for longer than the 10 s low-speed limit.
        # Not the repository's config/thumbd.yaml: the shipped defaults only.
        config = os.path.join(work, "empty.yaml")
        if not os.path.exists(config):
            with open(config, "w") as f:
                f.write("{}\n")
        env = dict(os.environ,
                   THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS="true",
                   THUMBD_UPSTREAM_LOW_SPEED_SECONDS="120",
                   THUMBD_LOG_LEVEL="warning", **(extra or {}))
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:%d" % self.port, "--db", os.path.join(work, name + ".sqlite"),
             "--config", config],
            env=env, stdout=subprocess.DEVNULL)
        wait_port(self.port)
        self.pids = [self.proc.pid]

    def path(self, origin_path):
        return "/thumb?url=" + urllib.parse.quote(self.origin.url(origin_path), safe="")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


NGINX_CONF = """
worker_processes 2;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    proxy_cache_path {work}/cache levels=1:2 keys_zone=thumbs:64m max_size=1g inactive=1d use_temp_path=off;
    upstream origin {{ server 127.0.0.1:{origin}; keepalive 64; }}
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache thumbs;
            proxy_cache_key $request_uri;
            proxy_cache_valid 200 1d;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 30s;
            proxy_cache_lock_age 30s;
            proxy_read_timeout 60s;
            add_header X-Cache $upstream_cache_status;
        }}
    }}
}}
"""


class PeerCache:
    """A peer that caches in front of the origin (nginx, Varnish): its process tree, the
    origin's paths as they are, a graceful stop."""
    stop_signal = signal.SIGTERM

    @property
    def pids(self):
        # Read at measurement time: nginx's cache loader exits a minute after start.
        return [self.proc.pid] + children(self.proc.pid)

    def path(self, origin_path):
        return origin_path

    def stop(self):
        self.proc.send_signal(self.stop_signal)
        self.proc.wait(timeout=30)


class Nginx(PeerCache):
    name = "nginx"

    def __init__(self, origin, work):
        self.port = free_port()
        self.origin = origin
        self.work = os.path.join(work, "nginx")
        os.makedirs(self.work)
        # As root, nginx's workers run as www-data: they must be able to write the cache here.
        os.chmod(work, 0o755)
        os.chmod(self.work, 0o777)
        conf = os.path.join(self.work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(work=self.work, origin=origin.port, port=self.port))
        self.proc = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", conf, "-p", self.work,
                                      "-g", "daemon off;"], stderr=subprocess.DEVNULL)
        wait_port(self.port)

    stop_signal = signal.SIGQUIT  # graceful: finish what is in flight


VARNISH_VCL = """
vcl 4.1;
backend origin {{ .host = "127.0.0.1"; .port = "{origin}"; }}
sub vcl_recv {{
    # As a parent cache, requests arrive in absolute form (GET http://host/path): the same
    # object whichever child asks.
    if (req.url ~ "^https?://") {{
        set req.http.host = regsub(req.url, "^https?://([^/]+).*$", "\\1");
        set req.url = regsub(req.url, "^https?://[^/]+", "");
    }}
}}
"""


class Varnish(PeerCache):
    """Varnish with its shipped settings (default_ttl 120 s, default_grace 10 s) and a VCL
    that only names the backend and accepts absolute-form requests (as a parent cache)."""
    name = "varnish"

    def __init__(self, origin, work):
        self.port = free_port()
        self.origin = origin
        self.work = os.path.join(work, "varnish-%d" % self.port)
        os.makedirs(self.work)
        vcl = os.path.join(self.work, "default.vcl")
        with open(vcl, "w") as f:
            f.write(VARNISH_VCL.format(origin=origin.port))
        self.proc = subprocess.Popen(
            [shutil.which("varnishd") or "/usr/sbin/varnishd", "-F", "-j", "none", "-a", "127.0.0.1:%d" % self.port,
             "-n", self.work, "-f", vcl, "-s", "malloc,256m"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, timeout=30)



class Direct:
    """The origin itself, without a proxy: the floor for the fan-out scenario."""
    name = "direct"

    def __init__(self, origin):
        self.port = origin.port

    def path(self, origin_path):
        return origin_path


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def proc_status(pids):
    """Sum of threads and RSS (MB) over the given processes."""
    threads, rss = 0, 0
    for pid in pids:
        if not os.path.exists("/proc/%d/status" % pid):
            continue
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("Threads:"):
                    threads += int(line.split()[1])
                elif line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
    return threads, rss / 1024.0


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        if not os.path.exists("/proc/%d/stat" % pid):
            continue
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


# ---------------------------------------------------------------- HTTP client (asyncio)

async def get(port, path, connect_only=None):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % path).encode())
    await writer.drain()
    if connect_only is not None:
        connect_only.set_result((reader, writer)) if not connect_only.done() else None
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = re.search(rb"(?i)content-length:\s*(\d+)", head)
    body = await reader.readexactly(int(length.group(1))) if length else await reader.read()
    writer.close()
    return status, len(body)


async def timed_get(port, path):
    start = time.monotonic()
    try:
        status, _ = await get(port, path)
    except Exception:
        status = 0
    return status, start, time.monotonic()


async def warm(port, paths, concurrency=50):
    semaphore = asyncio.Semaphore(concurrency)

    async def one(path):
        async with semaphore:
            return (await get(port, path))[0]
    statuses = await asyncio.gather(*(one(p) for p in paths))
    bad = [s for s in statuses if s != 200]
    if bad:
        raise RuntimeError("warm-up on :%d got %s" % (port, sorted(set(bad))))


# ---------------------------------------------------------------- scenarios

def wrk(port, paths, seconds, work):
    script = os.path.join(work, "paths.lua")
    listing = os.path.join(work, "paths.txt")
    with open(listing, "w") as f:
        f.write("\n".join(paths) + "\n")
    with open(script, "w") as f:
        f.write('local paths = {}\nfor line in io.lines("%s") do paths[#paths + 1] = line end\n'
                'local i = 0\nrequest = function()\n  i = i %% #paths + 1\n'
                '  return wrk.format("GET", paths[i])\nend\n' % listing)
    out = subprocess.run(["wrk", "-t1", "-c64", "-d%ds" % seconds, "--latency", "-s", script,
                          "http://127.0.0.1:%d" % port], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def latency(pct):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)\s*$" % pct, out, re.M)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: .*", out)
    if errors or socket_errors:
        print("   wrk reported: %s %s" % (errors.group(0) if errors else "", socket_errors.group(0) if socket_errors else ""),
              file=sys.stderr)
    return rps, latency(50), latency(99), requests


def hot(servers, origin, count, seconds, rounds, work, label):
    paths = ["/img/hot-%s-%d.jpg" % (label, i) for i in range(count)]
    results = {}
    for server in servers:
        asyncio.run(warm(server.port, [server.path(p) for p in paths]))
        results[server.name] = []
    for _ in range(rounds):  # interleaved, so both see the same noise
        for server in servers:
            before = cpu_seconds(server.pids)
            rps, p50, p99, requests = wrk(server.port, [server.path(p) for p in paths], seconds, work)
            # The server's own CPU per answer: steadier than req/s on a shared machine, where
            # wrk and the server take turns on the same two cores.
            cpu_us = (cpu_seconds(server.pids) - before) * 1e6 / max(1, requests)
            results[server.name].append((rps, p50, p99, cpu_us))
    return {name: tuple(statistics.median(r[i] for r in runs) for i in range(4)) for name, runs in results.items()}


def receive_response(sock, buffer):
    """Reads what is there into `buffer`; true once the whole response (or EOF) is in."""
    chunk = sock.recv(262144)
    buffer += chunk
    end = buffer.find(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length:\s*(\d+)", buffer[:end]) if end >= 0 else None
    return not chunk or bool(length and len(buffer) >= end + 4 + int(length.group(1)))


def burst(port, path, clients):
    """Sends `clients` requests at once on as many connections and returns, per client,
    (status, completion time). Plain sockets and epoll rather than asyncio: at 200 answers
    landing together, asyncio's per-response overhead was itself several milliseconds."""
    import selectors
    selector = selectors.DefaultSelector()
    request = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % path).encode()
    state = {}
    for _ in range(clients):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        state[sock] = bytearray()
        selector.register(sock, selectors.EVENT_READ)
    start = time.monotonic()
    for sock in state:
        sock.sendall(request)
    done = []
    deadline = time.monotonic() + 60
    while state and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1):
            sock = key.fileobj
            buffer = state[sock]
            if receive_response(sock, buffer):
                status = int(buffer.split(b" ", 2)[1]) if buffer else 0
                done.append((status, time.monotonic()))
                selector.unregister(sock)
                sock.close()
                del state[sock]
    return start, done


def cold_coalesce(server, origin, clients=200, delay_ms=200):
    origin_path = "/img/coalesce-%s.jpg" % server.name
    start, done = burst(server.port, server.path(origin_path + "?delay=%d" % delay_ms), clients)
    stats = origin.stats()
    answered = stats["answered"][origin_path]
    latencies = sorted((end - start) * 1000 for _, end in done)
    return {
        "origin requests": stats["requests"][origin_path],
        "ok": sum(1 for status, _ in done if status == 200),
        "p50 ms": statistics.median(latencies),
        "p99 ms": latencies[int(len(latencies) * 0.99) - 1],
        "max ms": latencies[-1],
        "last answer after origin ms": (max(end for _, end in done) - answered) * 1000,
    }


def cold_fanout(server, origin, urls=500, concurrency=100, delay_ms=50, paths=None, tag=""):
    """`urls` distinct cold URLs (or the given `paths`), `concurrency` in flight at a time (a
    new one starts as soon as one finishes), each on a new connection, by the C client
    (scripts/fanout.c): in Python the client's own loop was the slowest link.

    For its own URLs, also each request's time outside the origin: from the client's connect
    to the origin having read the request, plus from the origin starting its answer to the
    client having it whole (the origin's own time, its 50 ms included, taken out). The wall
    time is mostly the origin's; this is the part the proxy in between adds."""
    split = paths is None
    origin_paths = ["/img/fan-%s%s-%d.jpg" % (server.name, tag, i) for i in range(urls)]
    paths = paths or [server.path("%s?delay=%d" % (path, delay_ms)) for path in origin_paths]
    out = subprocess.run([compiled("fanout"), str(server.port), str(concurrency)] + (["times"] if split else []),
                         input="\n".join(paths) + "\n", capture_output=True, text=True, check=True, timeout=600).stdout.split("\n")
    wall, errors = out[0].split()
    result = {"wall ms": float(wall), "errors": int(errors)}
    if split:
        stats = origin.stats()
        outside = []
        for path, line in zip(origin_paths, out[1:]):
            began, ended = (float(v) for v in line.split())
            if path in stats["received"] and ended > 0:
                outside.append((stats["received"][path] - began + ended - stats["answered"][path]) * 1000)
        outside.sort()
        result["ms outside the origin per request: mean"] = statistics.mean(outside)
        result["ms outside the origin per request: p90"] = percentile(outside, 0.9)
    return result


def held_clients(server, origin, clients=1000):
    gate = "held-%s" % server.name
    path = server.path("/gate/" + gate)
    before_cpu = None

    async def run():
        nonlocal before_cpu
        tasks = []
        sent = []
        for _ in range(clients):
            fut = asyncio.get_running_loop().create_future()
            tasks.append(asyncio.ensure_future(get(server.port, path, connect_only=fut)))
            sent.append(fut)
        await asyncio.wait_for(asyncio.gather(*sent), 30)
        await asyncio.sleep(2.0)  # let every request reach its wait
        pids = server.pids
        threads, rss = proc_status(pids)
        before_cpu = cpu_seconds(pids)
        await asyncio.sleep(3.0)
        idle_cpu = (cpu_seconds(pids) - before_cpu) / 3.0 * 100
        await asyncio.get_running_loop().run_in_executor(None, origin.release, gate)
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
        ok = sum(1 for r in results if not isinstance(r, Exception) and r[0] == 200)
        return threads, rss, idle_cpu, ok
    threads, rss, idle_cpu, ok = asyncio.run(run())
    return {"threads": threads, "RSS MB": rss, "CPU % while waiting": idle_cpu, "answered 200": ok}


def post_batch(server, urls):
    body = json.dumps({"urls": urls}).encode()
    request = urllib.request.Request("http://127.0.0.1:%d/batches" % server.port, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return json.load(response)


def open_streams(port, paths):
    """Opens one event stream per path; returns {socket: bytearray} once every head arrived."""
    import selectors
    selector = selectors.DefaultSelector()
    streams = {}
    for path in paths:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n" % path).encode())
        sock.setblocking(False)
        streams[sock] = bytearray()
        selector.register(sock, selectors.EVENT_READ)
    waiting = set(streams)
    deadline = time.monotonic() + 60
    while waiting and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1):
            data = key.fileobj.recv(65536)
            streams[key.fileobj] += data
            if b"retry:" in streams[key.fileobj]:
                waiting.discard(key.fileobj)
    return selector, streams, len(waiting)


def held_streams(server, origin, batches=100, per_batch=100, gate="held-sse"):
    """10,000 subscribers on batches still running: threads, RSS and CPU while idle, then
    every stream must deliver its end once the origin answers."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    created = [post_batch(server, [origin.url("/gate/" + gate)]) for _ in range(batches)]
    selector, streams, missing = open_streams(server.port, [b["events"] for b in created for _ in range(per_batch)])
    time.sleep(1.0)
    pids = server.pids
    # CPU second by second over a little more than one keepalive period (15 s): the median
    # second is the idle cost between keepalives, the mean includes one keepalive to all.
    seconds = []
    for _ in range(16):
        before = cpu_seconds(pids)
        time.sleep(1.0)
        seconds.append((cpu_seconds(pids) - before) * 100)
    threads, rss = proc_status(pids)
    origin.release(gate)
    ended = 0
    deadline = time.monotonic() + 60
    open_ = set(streams)
    while open_ and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1):
            sock = key.fileobj
            data = sock.recv(65536)
            streams[sock] += data
            if b"event: end" in streams[sock] or not data:
                ended += b"event: end" in streams[sock]
                selector.unregister(sock)
                sock.close()
                open_.discard(sock)
    return {"streams open": len(streams) - missing, "threads": threads, "RSS MB": rss,
            "CPU % while idle (median second)": statistics.median(seconds),
            "CPU % over 16 s with a keepalive to all": statistics.mean(seconds),
            "streams that got end": ended}


def compiled(name, libraries=()):
    """Compiles scripts/NAME.c once per bench run (Debian's gcc), with these pkg-config libraries."""
    binary = os.path.join(tempfile.gettempdir(), "thumbd-bench-%s-%d" % (name, os.getpid()))
    if not os.path.exists(binary):
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", *libraries], capture_output=True, text=True,
                               check=True).stdout.split() if libraries else []
        subprocess.run(["cc", "-O2", "-pthread", "-o", binary, os.path.join(HERE, name + ".c"), *flags], check=True)
    return binary


def sseclient():
    return compiled("sseclient")


def percentile(sorted_values, p):
    return sorted_values[max(0, int(len(sorted_values) * p) - 1)]


def arrivals(port, path, subscribers, go):
    """Holds `subscribers` streams with the C client; calls go() once all have their head;
    returns each stream's arrival time of its done event (0 for none)."""
    client = subprocess.Popen([sseclient(), str(port), path, str(subscribers)], stdout=subprocess.PIPE, text=True)
    if client.stdout.readline().strip() != "ready":
        raise RuntimeError("the event-stream client did not get its streams")
    time.sleep(0.3)
    start = go()
    times = [float(line) for line in client.stdout.read().split()]
    client.wait(timeout=60)
    return start, times


def delivery(server, origin, subscribers=1000, rounds=5):
    """Each round: a batch of one item and `subscribers` streams on it, held by a C client
    (scripts/sseclient.c); the origin answers; how long until each stream has its done
    event (which carries end too: the batch's last item), from the moment the origin starts
    answering. The same client against scripts/ssefloor.c, a C process that only writes one
    event to as many sockets from two threads, gives this machine's floor. Medians of the
    rounds' figures: these machines are shared and noisy."""
    def one_round():
        gate = "deliver-%d-%d" % (subscribers, time.monotonic_ns())
        created = post_batch(server, [origin.url("/gate/" + gate)])
        _, times = arrivals(server.port, created["events"], subscribers, lambda: origin.release(gate))
        answered = origin.stats()["answered"]["/gate/" + gate]
        return sorted((t - answered) * 1000 for t in times if t > 0)

    def floor_round():
        floor = subprocess.Popen([compiled("ssefloor"), str(subscribers), "2"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            port = int(floor.stdout.readline())
            def go():
                floor.stdin.write("go\n")
                floor.stdin.flush()
            _, times = arrivals(port, "/events", subscribers, go)
            start = float(floor.stdout.readline())
        finally:
            floor.kill()
            floor.wait()
        return sorted((t - start) * 1000 for t in times if t > 0)

    thumbd, floor = [], []
    for _ in range(rounds):
        thumbd.append(one_round())
        floor.append(floor_round())
    median = lambda rounds_, p: statistics.median(percentile(r, p) for r in rounds_)
    return {"subscribers with done (fewest in a round)": (min(len(r) for r in thumbd), min(len(r) for r in floor)),
            "p50 ms (median of %d rounds)" % rounds: (median(thumbd, 0.5), median(floor, 0.5)),
            "p99 ms (median of %d rounds)" % rounds: (median(thumbd, 0.99), median(floor, 0.99)),
            "p99 ms (worst round)": (max(percentile(r, 0.99) for r in thumbd), max(percentile(r, 0.99) for r in floor))}


# ---------------------------------------------------------------- the table's scenarios
# Each takes (servers, origin, seconds, rounds, work) and returns table rows:
# (scenario, metric, thumbd value, nginx value or None).

def scenario_hot(servers, origin, seconds, rounds, work):
    rows = []
    for label, count in (("1 URL", 1), ("1000 URLs", 1000)):
        print("bench: hot hit, %s" % label, file=sys.stderr)
        result = hot(servers, origin, count, seconds, rounds, work, label.split()[0])
        t, n = result["thumbd"], result["nginx"]
        rows.append(("hot hit, %s" % label, "req/s", t[0], n[0]))
        rows.append(("hot hit, %s" % label, "p50 ms", t[1], n[1]))
        rows.append(("hot hit, %s" % label, "p99 ms", t[2], n[2]))
        rows.append(("hot hit, %s" % label, "server CPU us per answer", t[3], n[3]))
    return rows


class HitFloor:
    """scripts/hitfloor.c: one thread, one epoll set, a prebuilt answer of the same body:
    what one core takes to answer when nothing but the kernel's work stands in the way.
    With `mhd`, scripts/mhdfloor.c: libmicrohttpd as thumbd runs it, answering the same
    prebuilt body, with thumbd's shipped server.threads; with `fresh` too, a response of its
    own per answer, with a hot hit's headers and a new request id, as thumbd must."""

    def __init__(self, body_file, mhd=False, fresh=False):
        self.name = ("mhd-fresh" if fresh else "mhd") if mhd else "floor"
        command = ([compiled("mhdfloor", ["libmicrohttpd"]), body_file, "2"] + (["fresh"] if fresh else []) if mhd
                   else [compiled("hitfloor"), body_file])
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())
        self.pids = [self.proc.pid]

    def path(self, origin_path):
        return origin_path

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=10)


def pin(pids, cpus):
    """Every thread of these processes (and those they start later) onto `cpus`."""
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", cpus, str(pid)], check=True, stdout=subprocess.DEVNULL)


def scenario_pinned(servers, origin, seconds, rounds, work):
    """The hot hit with the server on core 0 and wrk on core 1, beside the floor server on the
    same core: thumbd, nginx (each with its shipped settings) and hitfloor all answer the
    same 14 KB body. Interleaved rounds, medians."""
    print("bench: hot hit, server pinned to core 0, wrk to core 1, beside the C floor", file=sys.stderr)
    path = "/img/pinned.jpg?size=14336"
    asyncio.run(warm(servers[0].port, [servers[0].path(path)]))
    body = os.path.join(work, "pinned-body")
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (servers[0].port, servers[0].path(path))) as r:
        data = r.read()
    with open(body, "wb") as f:
        f.write(data)
    floor, mhd, fresh = HitFloor(body), HitFloor(body, mhd=True), HitFloor(body, mhd=True, fresh=True)
    peers = [floor, mhd, fresh] + list(servers)
    results = {peer.name: [] for peer in peers}
    try:
        asyncio.run(warm(servers[1].port, [servers[1].path(path)]))
        for peer in peers:
            pin(peer.pids, "0x1")
        for _ in range(rounds):
            for peer in peers:
                out = subprocess.run(
                    ["taskset", "-c", "1", "wrk", "-t1", "-c64", "-d%ds" % seconds, "--latency",
                     "http://127.0.0.1:%d%s" % (peer.port, peer.path(path))],
                    capture_output=True, text=True, check=True).stdout
                results[peer.name].append(float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)))
    finally:
        for peer in servers:
            pin(peer.pids, "0x%x" % ((1 << os.cpu_count()) - 1))
        floor.stop()
        mhd.stop()
        fresh.stop()
    f, m, r, t, n = (statistics.median(results[name]) for name in ("floor", "mhd", "mhd-fresh", "thumbd", "nginx"))
    label = "hot hit, 14 KB, server on core 0 and wrk on core 1 (varnish column: the C floor)"
    return [(label, "req/s", t, n, f),
            (label, "share of the floor's req/s", t / f, n / f, 1.0),
            (label, "bare libmicrohttpd, same body (thumbd column): req/s", m, None, f),
            (label, "bare libmicrohttpd, a response per answer with a hit's 8 headers (thumbd column): req/s", r, None, f),
            (label, "the same, share of the floor's req/s (thumbd column)", r / f, None, 1.0)]


def side_by_side(label, measure, servers, origin):
    """Rows of one measurement taken on thumbd, then on nginx."""
    print("bench: %s" % label, file=sys.stderr)
    t, n = measure(servers[0], origin), measure(servers[1], origin)
    return [(label, key, t[key], n[key]) for key in t]


def scenario_coalesce(servers, origin, seconds, rounds, work):
    return side_by_side("cold coalesce, 200 clients, origin 200 ms", cold_coalesce, servers, origin)


def scenario_fanout(servers, origin, seconds, rounds, work):
    """Interleaved rounds (new URLs each), medians: one round moves by 10% on these machines,
    so at least 7 (a round takes a second).

    Twice: with both caches in the bench's work directory on disk, as every other scenario,
    and with both in memory (tmpfs, /dev/shm). On a disk whose ext4 has no journal (this
    machine's root), creating a file scans past every inode freed in the last 1 to 6 minutes
    (the kernel's recently_deleted()): nginx, a file per cached object, then pays for whatever
    was deleted before the run (perf: 75% of its CPU there after an earlier run's cleanup),
    and thumbd, one SQLite file, does not. The tmpfs rounds measure the two proxies alone."""
    rounds = max(rounds, 7)
    print("bench: cold fan-out, %d rounds" % rounds, file=sys.stderr)
    memory = tempfile.mkdtemp(prefix="thumbd-bench-", dir="/dev/shm") if os.path.isdir("/dev/shm") else None
    in_memory = []
    try:
        if memory:
            in_memory = [Thumbd(servers[0].binary, origin, memory), Nginx(origin, memory)]
        runs = {}
        for r in range(rounds):
            placed = [("disk", server) for server in servers] + [("", Direct(origin))] + [("tmpfs", server) for server in in_memory]
            for place, server in placed:
                before = origin.stats()["connections"]
                cpu = cpu_seconds(server.pids) if place else 0
                result = cold_fanout(server, origin, tag="-%s-r%d" % (place or "direct", r))
                # /proc counts CPU in 10 ms ticks: the mean of the rounds, not their median.
                result["server CPU ms (mean)"] = (cpu_seconds(server.pids) - cpu) * 1000 if place else None
                result["origin connections"] = origin.stats()["connections"] - before - 1  # less the stats request itself
                runs.setdefault((place, server.name), []).append(result)
    finally:
        for server in in_memory:
            server.stop()
        if memory:
            shutil.rmtree(memory, ignore_errors=True)
    def summary(key, values):
        if values[0] is None:
            return None
        return statistics.mean(values) if "(mean)" in key else statistics.median(values)
    summaries = {name: {key: summary(key, [run[key] for run in result]) for key in result[0]}
                 for name, result in runs.items()}
    direct = summaries[("", "direct")]
    rows = []
    label = "cold fan-out, 500 URLs from one host, c=100, origin 50 ms (median of %d rounds)" % rounds
    for place in ("disk", "tmpfs"):
        if ("tmpfs", "thumbd") not in summaries and place == "tmpfs":
            continue
        t, n = summaries[(place, "thumbd")], summaries[(place, "nginx")]
        where = ", caches on %s" % ("disk (/tmp)" if place == "disk" else "tmpfs (/dev/shm)")
        rows += [(label + where, key, t[key], n[key]) for key in t]
    return rows + [(label, "origin alone, wall ms (floor)", direct["wall ms"], direct["wall ms"]),
                   (label, "origin alone, ms outside the origin per request: mean (floor)",
                    direct["ms outside the origin per request: mean"], direct["ms outside the origin per request: mean"])]


def expiry_stampede(server, origin, clients=100, delay_ms=200):
    """A popular image whose max-age (2 s) has just run out; the origin takes 200 ms and
    answers a matching If-None-Match with 304. 100 clients at once: origin requests, 304s,
    latencies."""
    origin_path = "/validated/stampede-%s" % server.name
    path = server.path(origin_path + "?cc=max-age%%3D2&delay=%d" % delay_ms)
    start, done = burst(server.port, path, 1)
    if done[0][0] != 200:
        raise RuntimeError("%s: priming the stampede got %s" % (server.name, done[0][0]))
    time.sleep(3.1)  # past max-age, whole seconds included; within a 10 s grace
    before = origin.stats()
    # The C client (scripts/burst.c): Python's own loop was several ms of the median.
    out = subprocess.run([compiled("burst"), str(server.port), path, str(clients)], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    answers = [(int(status), float(ms)) for status, ms in (line.split() for line in out.splitlines())]
    time.sleep(delay_ms / 1000 + 0.3)  # a background refresh reaches the origin meanwhile
    after = origin.stats()
    latencies = sorted(ms for _, ms in answers)
    return {
        "origin requests": after["requests"].get(origin_path, 0) - before["requests"].get(origin_path, 0),
        "origin 304s": after["notModified"].get(origin_path, 0) - before["notModified"].get(origin_path, 0),
        "ok": sum(1 for status, _ in answers if status == 200),
        "p50 ms": statistics.median(latencies),
        "max ms": latencies[-1],
    }


def scenario_stampede(servers, origin, seconds, rounds, work):
    print("bench: expiry stampede (with varnish)", file=sys.stderr)
    varnish = Varnish(origin, work)
    try:
        t, n, v = (expiry_stampede(server, origin) for server in (servers[0], servers[1], varnish))
    finally:
        varnish.stop()
    label = "expiry stampede, 100 clients, max-age 2 s ran out, origin 200 ms with 304"
    return [(label, key, t[key], n[key], v[key]) for key in t]


def scenario_parent(servers, origin, seconds, rounds, work):
    """Two thumbd daemons whose upstream.proxy is one Varnish in front of the origin: 50 new
    images, each asked of both daemons at the same moment. The origin should see each once."""
    print("bench: parent cache (2 thumbd behind 1 varnish)", file=sys.stderr)
    varnish = Varnish(origin, work)
    children_ = []
    try:
        proxy = {"THUMBD_UPSTREAM_PROXY": "http://127.0.0.1:%d" % varnish.port}
        children_ = [Thumbd(servers[0].proc.args[0], origin, work, name="child-%d" % i, extra=proxy) for i in (1, 2)]
        paths = ["/img/parent-%d.jpg?delay=20" % i for i in range(50)]

        async def ask_both():
            return await asyncio.gather(*(get(child.port, child.path(p)) for p in paths for child in children_))
        statuses = [status for status, _ in asyncio.run(ask_both())]
        requests = origin.stats()["requests"]
        per_image = [requests.get("/img/parent-%d.jpg" % i, 0) for i in range(50)]
    finally:
        for child in children_:
            child.stop()
        varnish.stop()
    label = "parent cache: 2 thumbd (upstream.proxy) behind 1 varnish, 50 new images asked of both at once"
    return [(label, "answers 200 (of 100)", sum(1 for s in statuses if s == 200), None),
            (label, "origin requests in all", sum(per_image), None),
            (label, "origin requests for the most-asked image", max(per_image), None)]


def scenario_waiting(servers, origin, seconds, rounds, work):
    return side_by_side("1000 clients waiting on a slow origin", held_clients, servers, origin)


def scenario_streams(servers, origin, seconds, rounds, work):
    print("bench: 10000 event streams", file=sys.stderr)
    label = "10000 SSE subscribers on running batches (nginx: no equivalent)"
    rows = [(label, key, value, None) for key, value in held_streams(servers[0], origin).items()]
    # Each stream holds libmicrohttpd's connection pool, server.maxRequestBytes (8 KB), all of
    # it resident: the same streams on a fresh daemon, with the shipped pool and a 4 KB one
    # (a changed setting), show that share.
    for setting, extra in (("shipped settings", None),
                           ("server.maxRequestBytes=4096 (changed)", {"THUMBD_SERVER_MAX_REQUEST_BYTES": "4096"})):
        fresh = Thumbd(servers[0].binary, origin, work, name="thumbd-streams-%d" % len(rows), extra=extra)
        try:
            figures = held_streams(fresh, origin, gate="held-sse-%d" % len(rows))
        finally:
            fresh.stop()
        rows.append((label + ", a fresh daemon, " + setting, "RSS MB", figures["RSS MB"], None))
        rows.append((label + ", a fresh daemon, " + setting, "streams that got end", figures["streams that got end"], None))
    # The floor: libmicrohttpd alone holding the same 10,000 streams (scripts/mhdstreams.c,
    # as thumbd runs it), with each pool size; and thumbd's idle process, where it starts.
    idle = Thumbd(servers[0].binary, origin, work, name="thumbd-idle")
    try:
        time.sleep(1.0)
        rows.append((label, "thumbd idle, before any stream: RSS MB", proc_status(idle.pids)[1], None))
    finally:
        idle.stop()
    for pool in (8192, 4096):
        rss, per_stream = mhd_streams(pool)
        floor = label + ", libmicrohttpd alone (scripts/mhdstreams.c), pool %d bytes" % pool
        rows.append((floor, "RSS MB", rss, None))
        rows.append((floor, "KB per stream", per_stream, None))
    return rows


def mhd_streams(pool, count=10000):
    """RSS MB of scripts/mhdstreams.c holding `count` streams, and KB per stream over its idle RSS."""
    proc = subprocess.Popen([compiled("mhdstreams", ["libmicrohttpd"]), str(pool), "2"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        baseline = proc_status([proc.pid])[1]
        selector, streams, missing = open_streams(port, ["/events"] * count)
        time.sleep(1.0)
        rss = proc_status([proc.pid])[1]
        for sock in streams:
            sock.close()
        if missing:
            raise RuntimeError("mhdstreams: %d streams got no head" % missing)
        return rss, (rss - baseline) * 1024 / count
    finally:
        proc.kill()
        proc.wait()


def scenario_delivery(servers, origin, seconds, rounds, work):
    print("bench: done delivery to 1000 subscribers", file=sys.stderr)
    label = "done delivered to 1000 subscribers, after the origin answers (other column: raw C fan-out floor)"
    return [(label, key, t, f) for key, (t, f) in delivery(servers[0], origin).items()]


def thread_cpu_seconds(pid, name):
    """CPU seconds (user + system) of the threads of `pid` called `name`."""
    total = 0
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if comm == name:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def fetch_thread_cpu(server, origin, urls=300, size=1 << 20):
    """CPU time of the transfer thread (curl's) per cold fetch of a 1 MB image: what the
    thread does besides moving bytes (hashing, storing, answering) shows up here."""
    pid = server.proc.pid
    before = thread_cpu_seconds(pid, "thumbd-fetch")
    paths = [server.path("/img/cpu-%d.jpg?size=%d" % (i, size)) for i in range(urls)]
    t = cold_fanout(server, origin, concurrency=50, paths=paths)
    after = thread_cpu_seconds(pid, "thumbd-fetch")
    return {"transfer-thread CPU ms per fetch": (after - before) * 1000 / urls, "wall ms": t["wall ms"],
            "errors": t["errors"]}


def scenario_fetchcpu(servers, origin, seconds, rounds, work):
    print("bench: transfer-thread CPU per cold fetch", file=sys.stderr)
    label = "300 cold fetches of 1 MB, c=50 (nginx: no equivalent)"
    rows = [(label, key, value, None) for key, value in fetch_thread_cpu(servers[0], origin).items()]
    # 300 MB in half a second outruns the cache file's writes: with the shipped
    # upstream.maxBufferedBytes the downloads wait for the disk. The same run with the budget
    # out of reach (a changed setting) shows what that waiting costs.
    unbounded = Thumbd(servers[0].binary, origin, work, name="thumbd-unbounded",
                       extra={"THUMBD_UPSTREAM_MAX_BUFFERED_BYTES": str(64 << 30)})
    try:
        changed = label + ", upstream.maxBufferedBytes=64 GiB (changed)"
        rows += [(changed, key, value, None) for key, value in fetch_thread_cpu(unbounded, origin).items()]
    finally:
        unbounded.stop()
    return rows


SCENARIOS = {"hot": scenario_hot, "pinned": scenario_pinned, "coalesce": scenario_coalesce, "fanout": scenario_fanout,
             "stampede": scenario_stampede, "parent": scenario_parent,
             "waiting": scenario_waiting, "streams": scenario_streams, "delivery": scenario_delivery,
             "fetchcpu": scenario_fetchcpu}


# ---------------------------------------------------------------- main

def ratio(a, b):
    return "%.2f" % (a / b) if b else "-"


def fmt(v):
    if v is None:
        return "-"
    return ("%.0f" % v if abs(v) >= 100 else "%.2f" % v) if isinstance(v, float) else str(v)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--thumbd", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", action="append", choices=SCENARIOS,
                        help="run just this scenario (repeatable); default: all")
    args = parser.parse_args()
    wanted = set(args.only or SCENARIOS)
    seconds, rounds = (4, 1) if args.quick else (8, 3)
    work = tempfile.mkdtemp(prefix="thumbd-bench-")
    origin = Origin()
    servers = []
    rows = []
    try:
        servers = [Thumbd(os.path.abspath(args.thumbd), origin, work), Nginx(origin, work)]
        print("bench: origin :%d, thumbd :%d, nginx :%d; wrk -t1 -c64 %ds x %d rounds" %
              (origin.port, servers[0].port, servers[1].port, seconds, rounds), file=sys.stderr)
        for name, scenario in SCENARIOS.items():
            if name in wanted:
                rows += scenario(servers, origin, seconds, rounds, work)
    finally:
        for server in servers:
            try:
                server.stop()
            except Exception as error:  # report, but keep stopping the others
                print("bench: stopping %s: %s" % (server.name, error), file=sys.stderr)
        origin.stop()
        shutil.rmtree(work, ignore_errors=True)

    print("| scenario | metric | thumbd | nginx | thumbd/nginx | varnish |")
    print("|---|---|---:|---:|---:|---:|")
    for row in rows:
        scenario, metric, t, n = row[:4]
        v = row[4] if len(row) > 4 else None
        print("| %s | %s | %s | %s | %s | %s |" % (scenario, metric, fmt(t), fmt(n), ratio(t, n), fmt(v)))
    varnish = subprocess.run(["varnishd", "-V"], capture_output=True, text=True).stderr.split("\n")[0]
    print("\n%s, %d cores, %s, %s" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(),
                                       subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
                                       varnish))


if __name__ == "__main__":
    main()
