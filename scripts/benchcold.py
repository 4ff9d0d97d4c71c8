"""The cold scenes of scripts/bench, thumbd beside nginx (and Varnish where it is about expiry
or a parent cache): many clients on one cold URL, a fan-out of cold URLs, an expiry
stampede, a parent cache for two thumbd, 1000 clients waiting on a slow origin, and the
transfer thread's CPU per cold 1 MB fetch."""
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchpeers import Direct, Nginx, Thumbd, Varnish, compiled, cpu_seconds, get, percentile


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


def cold_coalesce(server, origin, clients=200, delay_ms=200, tag=""):
    origin_path = "/img/coalesce-%s%s.jpg" % (server.name, tag)
    start, done = burst(server.port, server.path(origin_path + "?delay=%d" % delay_ms), clients)
    stats = origin.stats()
    return coalesce_figures(start, done, stats["answered"][origin_path], stats["requests"][origin_path])


def coalesce_figures(start, done, answered, origin_requests):
    latencies = sorted((end - start) * 1000 for _, end in done)
    return {
        "origin requests": origin_requests,
        "ok": sum(1 for status, _ in done if status == 200),
        "p50 ms": statistics.median(latencies),
        "p99 ms": latencies[int(len(latencies) * 0.99) - 1],
        "max ms": latencies[-1],
        "last answer after origin ms": (max(end for _, end in done) - answered) * 1000,
    }


class CoalesceFloor:
    """scripts/hitfloor.c holding every request until 200 ms after the first came in, then
    answering them all at once with the origin's bytes: what the same client on the same
    cores sees when a proxy adds nothing between the origin's answer and its own."""

    def __init__(self, origin, work, delay_ms=200):
        body_file = os.path.join(work, "coalesce-floor.jpg")
        with urllib.request.urlopen(origin.url("/img/coalesce-floor.jpg")) as r, open(body_file, "wb") as f:
            f.write(r.read())
        self.proc = subprocess.Popen([compiled("hitfloor"), body_file, str(delay_ms)], stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())

    def measure(self, clients=200):
        start, done = burst(self.port, "/img/coalesce-floor.jpg", clients)
        return coalesce_figures(start, done, float(self.proc.stdout.readline()), 1)

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=10)


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


def side_by_side(label, measure, servers, origin):
    """Rows of one measurement taken on thumbd, then on nginx."""
    print("bench: %s" % label, file=sys.stderr)
    t, n = measure(servers[0], origin), measure(servers[1], origin)
    return [(label, key, t[key], n[key]) for key in t]


def scenario_coalesce(servers, origin, seconds, rounds, work):
    """Interleaved rounds on new URLs, medians (one round moves by several milliseconds here),
    beside the floor in the varnish column."""
    label = "cold coalesce, 200 clients, origin 200 ms (varnish column: the floor, median of %d)" % (rounds + 2)
    print("bench: %s" % label, file=sys.stderr)
    floor = CoalesceFloor(origin, work)
    runs = {"thumbd": [], "nginx": [], "floor": []}
    try:
        for i in range(rounds + 2):
            for server in servers:
                runs[server.name].append(cold_coalesce(server, origin, tag="-%d" % i))
            runs["floor"].append(floor.measure())
    finally:
        floor.stop()

    def median(name, key):
        return statistics.median(run[key] for run in runs[name])
    return [(label, key, median("thumbd", key), median("nginx", key), median("floor", key)) for key in runs["thumbd"][0]]


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
