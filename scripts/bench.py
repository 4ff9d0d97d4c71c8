#!/usr/bin/env python3
"""Runs the scenarios of scripts/bench against thumbd and nginx (and Varnish where the
scenario is about expiry or a parent cache) in one run.

Both proxies sit in front of the same origin (scripts/testorigin.py). nginx gets the
configuration its users would write for this job: proxy_cache, proxy_cache_lock on,
upstream keep-alive, access_log off. Hot figures are the median of several wrk rounds.
"""
import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchcold import scenario_coalesce, scenario_fanout, scenario_parent, scenario_stampede
from benchfetchcost import scenario_fetchcpu, scenario_waiting
from benchpeers import Instructions, Nginx, Origin, Thumbd, compiled, cpu_seconds, pin, warm, wrk
from benchstreams import scenario_delivery, scenario_streams


def hot(servers, origin, count, seconds, rounds, work, label, floors=()):
    paths = ["/img/hot-%s-%d.jpg" % (label, i) for i in range(count)]
    results = {}
    for server in servers:
        asyncio.run(warm(server.port, [server.path(p) for p in paths]))
    peers = list(servers) + [floor(work, servers[0], paths[0]) for floor in floors]
    results = {peer.name: [] for peer in peers}
    try:
        for round in range(rounds):
            # Interleaved, so all see the same noise, and in turn forward and backward, so that
            # none is always the one after a sync or after a given other.
            for server in peers if round % 2 == 0 else peers[::-1]:
                # What earlier scenes left dirty is written back first, not beside this round: after
                # the grid 1 GB was, and a hit then cost thumbd 20.6 us, 17.2 after a sync.
                os.sync()
                before = cpu_seconds(server.pids)
                before_user = cpu_seconds(server.pids, user_only=True)
                with Instructions(server.pids) as counted:
                    rps, p50, p99, requests = wrk(server.port, [server.path(p) for p in paths], seconds, work)
                # The server's own CPU per answer: steadier than req/s on a shared machine, where
                # wrk and the server take turns on the same two cores.
                cpu_us = (cpu_seconds(server.pids) - before) * 1e6 / max(1, requests)
                # Its user-space part: the server's own work, without the kernel's (sockets and
                # copies, about the same for every server here, and the part that varies most).
                user_us = (cpu_seconds(server.pids, user_only=True) - before_user) * 1e6 / max(1, requests)
                per_answer = counted.count / max(1, requests) if counted.count is not None else None
                results[server.name].append((rps, p50, p99, cpu_us, per_answer, user_us))
    finally:
        for peer in peers[len(servers):]:
            peer.stop()
    return {name: tuple(None if any(r[i] is None for r in runs) else statistics.median(r[i] for r in runs)
                        for i in range(6)) for name, runs in results.items()}


def scenario_hot(servers, origin, seconds, rounds, work):
    """The hot hit, unpinned: wrk and the server share the machine's cores, as a browser and
    thumbd do. With 1 URL, beside the C floor and bare libmicrohttpd answering the same body
    unpinned too: what the kernel (and libmicrohttpd) cost an answer on this machine, which
    every server pays, and so what bounds thumbd's ratio to nginx here."""
    rows = []
    # A round moves by 20% and more here; the median of 5 does not move with one such round.
    rounds = max(rounds, 5) if rounds > 1 else rounds
    for label, count, floors in (("1 URL", 1, (HitFloor.plain, HitFloor.fresh)), ("1000 URLs", 1000, ())):
        print("bench: hot hit, %s" % label, file=sys.stderr)
        result = hot(servers, origin, count, seconds, rounds, work, label.split()[0], floors)
        t, n = result["thumbd"], result["nginx"]
        f = result.get("floor", (None,) * 6)
        rows.append(("hot hit, %s" % label, "req/s", t[0], n[0], f[0]))
        rows.append(("hot hit, %s" % label, "p50 ms", t[1], n[1]))
        rows.append(("hot hit, %s" % label, "p99 ms", t[2], n[2]))
        rows.append(("hot hit, %s" % label, "server CPU us per answer", t[3], n[3], f[3]))
        rows.append(("hot hit, %s" % label, "of which in user space", t[5], n[5], f[5]))
        if "mhd-fresh" in result:
            m = result["mhd-fresh"]
            rows.append(("hot hit, %s" % label, "bare libmicrohttpd, a response per answer with a hit's headers "
                         "(thumbd column): req/s", m[0], None, f[0]))
            rows.append(("hot hit, %s" % label, "the same: server CPU us per answer (thumbd column)", m[3], None, f[3]))
            rows.append(("hot hit, %s" % label, "the same: of which in user space (thumbd column)", m[5], None, f[5]))
        if Instructions.supported():
            rows.append(("hot hit, %s" % label, "server instructions per answer (perf stat)", t[4], n[4]))
    if not Instructions.supported():
        print("bench: instructions per answer: this machine exposes no instruction counter to perf stat", file=sys.stderr)
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

    @classmethod
    def plain(cls, work, server, path):
        """The C floor, unpinned, answering `server`'s answer to `path` (its body)."""
        return cls(cls.body(work, server, path))

    @classmethod
    def fresh(cls, work, server, path):
        return cls(cls.body(work, server, path), mhd=True, fresh=True)

    @staticmethod
    def body(work, server, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (server.port, server.path(path))) as r:
            data = r.read()
        name = os.path.join(work, "floor-body-%d" % len(data))
        with open(name, "wb") as f:
            f.write(data)
        return name

    def path(self, origin_path):
        return "/"

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=10)


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
                os.sync()  # as in `hot`: no writeback of earlier scenes beside the round
                before = cpu_seconds(peer.pids)
                out = subprocess.run(
                    ["taskset", "-c", "1", "wrk", "-t1", "-c64", "-d%ds" % seconds, "--latency",
                     "http://127.0.0.1:%d%s" % (peer.port, peer.path(path))],
                    capture_output=True, text=True, check=True).stdout
                requests = int(re.search(r"(\d+) requests in", out).group(1))
                results[peer.name].append((float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
                                           (cpu_seconds(peer.pids) - before) * 1e6 / max(1, requests)))
    finally:
        for peer in servers:
            pin(peer.pids, "0x%x" % ((1 << os.cpu_count()) - 1))
        floor.stop()
        mhd.stop()
        fresh.stop()
    f, m, r, t, n = (statistics.median(rps for rps, _ in results[name]) for name in ("floor", "mhd", "mhd-fresh", "thumbd", "nginx"))
    fc, tc, nc = (statistics.median(cpu for _, cpu in results[name]) for name in ("floor", "thumbd", "nginx"))
    label = "hot hit, 14 KB, server on core 0 and wrk on core 1 (varnish column: the C floor)"
    return [(label, "req/s", t, n, f),
            (label, "server CPU us per answer", tc, nc, fc),
            (label, "share of the floor's req/s", t / f, n / f, 1.0),
            (label, "bare libmicrohttpd, same body (thumbd column): req/s", m, None, f),
            (label, "bare libmicrohttpd, a response per answer with a hit's 8 headers (thumbd column): req/s", r, None, f),
            (label, "the same, share of the floor's req/s (thumbd column)", r / f, None, 1.0)]


SCENARIOS = {"hot": scenario_hot, "pinned": scenario_pinned, "coalesce": scenario_coalesce, "fanout": scenario_fanout,
             "stampede": scenario_stampede, "parent": scenario_parent,
             "waiting": scenario_waiting, "streams": scenario_streams, "delivery": scenario_delivery,
             "fetchcpu": scenario_fetchcpu}


# ---------------------------------------------------------------- main


def ratio(a, b):
    return "%.2f" % (a / b) if b else "-"


def fmt(v, metric=""):
    if v is None:
        return "-"
    if isinstance(v, float) and metric.endswith(" MB"):
        return "%.1f" % v  # memory targets sit near round figures: 149.6 is not 150
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
        print("| %s | %s | %s | %s | %s | %s |" % (scenario, metric, fmt(t, metric), fmt(n, metric), ratio(t, n), fmt(v, metric)))
    varnish = subprocess.run(["varnishd", "-V"], capture_output=True, text=True).stderr.split("\n")[0]
    print("\n%s, %d cores, %s, %s" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(),
                                       subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
                                       varnish))


if __name__ == "__main__":
    main()
