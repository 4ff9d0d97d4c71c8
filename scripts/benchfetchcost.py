"""What waiting and fetching cost thumbd beside nginx: the threads, memory and CPU of 1000
clients held on a slow origin, and the transfer thread's CPU per cold fetch."""
import asyncio
import sys

from benchcold import cold_fanout, side_by_side
from benchpeers import Thumbd, cpu_seconds, get, proc_status, thread_cpu_seconds


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


def scenario_waiting(servers, origin, seconds, rounds, work):
    return side_by_side("1000 clients waiting on a slow origin", held_clients, servers, origin)


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
