"""What every bench script shares: the test origin, thumbd, nginx and Varnish, each with the
settings it ships with; the C floor servers and clients, compiled on first use; pinning to
cores; /proc readings; and the small HTTP clients the scenes use."""
import asyncio
import json
import os
import re
import shutil
import signal
import socket
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


class Instructions:
    """Instructions the processes `pids` retire while the block runs, counted by `perf stat`:
    a figure that does not move with the machine's load or clock, unlike seconds. Only where
    the machine exposes the counter (many virtual machines do not: then `count` is None)."""
    _supported = None

    def __init__(self, pids):
        self.pids = pids
        self.count = None

    @classmethod
    def supported(cls):
        if cls._supported is None:
            try:
                out = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"], capture_output=True, text=True)
                cls._supported = out.returncode == 0 and re.search(r"^\d+,", out.stderr, re.M) is not None
            except OSError:
                cls._supported = False
        return cls._supported

    def __enter__(self):
        self.proc = None
        if self.supported():
            self.proc = subprocess.Popen(["perf", "stat", "-x,", "-e", "instructions", "-p", ",".join(map(str, self.pids))],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(0.2)  # perf attaches
        return self

    def __exit__(self, *exc):
        if self.proc:
            self.proc.send_signal(signal.SIGINT)
            err = self.proc.communicate(timeout=30)[1]
            match = re.search(r"^(\d+),", err, re.M)
            self.count = int(match.group(1)) if match else None
        return False


def cpu_seconds(pids, user_only=False):
    """CPU time the processes have used; `user_only`: in user space alone (their own code and
    libraries, without the kernel's work on their behalf, which is what varies most here)."""
    total = 0
    for pid in pids:
        if not os.path.exists("/proc/%d/stat" % pid):
            continue
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + (0 if user_only else int(fields[12]))) / os.sysconf("SC_CLK_TCK")
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


def compiled(name, libraries=()):
    """Compiles scripts/NAME.c once per bench run (Debian's gcc), with these pkg-config libraries."""
    binary = os.path.join(tempfile.gettempdir(), "thumbd-bench-%s-%d" % (name, os.getpid()))
    if not os.path.exists(binary):
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", *libraries], capture_output=True, text=True,
                               check=True).stdout.split() if libraries else []
        subprocess.run(["cc", "-O2", "-pthread", "-o", binary, os.path.join(HERE, name + ".c"), *flags], check=True)
    return binary


def percentile(sorted_values, p):
    return sorted_values[max(0, int(len(sorted_values) * p) - 1)]


def pin(pids, cpus):
    """Every thread of these processes (and those they start later) onto `cpus`."""
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", cpus, str(pid)], check=True, stdout=subprocess.DEVNULL)


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
