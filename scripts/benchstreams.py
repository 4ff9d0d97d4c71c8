"""The event-stream scenes of scripts/bench: 10,000 streams held on running batches (memory,
idle CPU, every end delivered), beside libmicrohttpd alone holding as many; and one done
delivered to 1000 subscribers, beside a C fan-out of the same bytes."""
import json
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

from benchpeers import Thumbd, compiled, cpu_seconds, percentile, proc_status


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


def sseclient():
    return compiled("sseclient")


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
    for pool, answer in ((8192, None), (4096, None), (8192, "thumbd")):
        rss, per_stream = mhd_streams(pool, answer)
        floor = label + ", libmicrohttpd alone (scripts/mhdstreams.c), pool %d bytes" % pool
        if answer:
            # libmicrohttpd's own part of thumbd's answer: its five headers, its 1-byte block.
            floor += ", with thumbd's headers"
        rows.append((floor, "RSS MB", rss, None))
        rows.append((floor, "KB per stream", per_stream, None))
    return rows


def mhd_streams(pool, answer=None, count=10000):
    """RSS MB of scripts/mhdstreams.c holding `count` streams, and KB per stream over its idle RSS."""
    proc = subprocess.Popen([compiled("mhdstreams", ["libmicrohttpd"]), str(pool), "2"] + ([answer] if answer else []),
                            stdout=subprocess.PIPE, text=True)
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
