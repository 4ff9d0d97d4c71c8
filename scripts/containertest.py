#!/usr/bin/env python3
"""The Dockerfile and config/compose/compose.yaml, run on a machine without a container engine.

Each stage runs what the Dockerfile says, on the nearest thing this machine has to its
base image:

- build (`FROM swift:M.m-bookworm`): this machine, which must be Debian 12 with Swift M.m
  and the stage's -dev packages. Its RUN lines other than apt-get's run in a directory made
  of its COPY lines only (a file the build needs and the Dockerfile does not copy fails
  here), with its `/out` under .build-container/.
- run (`FROM debian:bookworm-slim`): a Debian 12 minbase root made by debootstrap (kept as a
  tarball under .build-container/, unpacked fresh each time). Its RUN lines run in it as
  root, its COPY lines copy into it, and the daemon runs in it as its USER with its ENV,
  WORKDIR, VOLUME (a directory per service), ENTRYPOINT and HEALTHCHECK. Mounts (/proc,
  /dev, the volume) are made in a private mount namespace (`unshare --mount`): the host
  never sees them.

Then the compose file's services, on this machine's loopback: `origin` is nginx serving a
test image from a copy of its images folder, `varnish` is varnishd with the compose's
default.vcl, and `thumbd-a` and `thumbd-b` are the image with the compose's environment.
Each service's name is replaced by 127.0.0.1 and a free port, and each thumbd listens on
127.0.0.1 and a free port (what `ports:` publishes), nothing else is changed. Checked:

- the health check answers 0 while a thumbd serves, and not 0 once it has stopped;
- both thumbd answer a thumbnail of `http://origin/...` of the asked size, which the origin
  served once: Varnish answered the second daemon;
- a request whose Host is the service name is answered; another name is 421;
- STOPSIGNAL stops a thumbd cleanly, and its volume keeps its cache: restarted with Varnish
  and the origin gone, it answers the same thumbnail from its own cache.

Usage: containertest.py WORKDIR   (as root: debootstrap, chroot and unshare need it)
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pyvips
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchpeers import free_port, wait_port  # noqa: E402
from dockerstages import CACHE, ROOT, Image, base_root, build_stage, check, dockerfile_stages, in_root, tail  # noqa: E402

work = os.path.abspath(sys.argv[1])


class Container:
    def __init__(self, image, name, environment, volume, listen_port):
        self.image, self.name, self.volume, self.port = image, name, volume, listen_port
        # `ports: ["127.0.0.1:8081:8080"]`, without a network namespace: the daemon itself
        # listens on the host's loopback.
        self.env = dict(image.env, **environment, THUMBD_SERVER_LISTEN="127.0.0.1:%d" % listen_port)
        self.log = open(os.path.join(work, name + ".log"), "ab")
        self.start()

    def run(self, argv, **popen):
        return in_root(self.image.rootfs, argv, self.env, self.image.uid, (self.volume, self.image.volume), self.image.workdir, **popen)

    def start(self):
        self.proc = self.run(self.image.entrypoint, stdout=self.log, stderr=self.log)
        try:
            wait_port(self.port, timeout=30)
        except RuntimeError:
            check(False, "%s did not start (exit %s): %s" % (self.name, self.proc.poll(), tail(self.log.name, 10)))

    def healthy(self):
        probe = self.run(self.image.health, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return probe.wait(timeout=30) == 0

    def get(self, path, host=None):
        request = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), headers={"Host": host} if host else {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def stop(self):
        self.proc.send_signal(self.image.stop_signal)
        return self.proc.wait(timeout=30)


def origin_service(service, images):
    """nginx serving a copy of the compose's images folder, with an access log to count by."""
    port, conf_dir = free_port(), os.path.join(work, "origin")
    os.makedirs(conf_dir)
    check(service["image"].startswith("nginx:"), "the origin is %s, not nginx" % service["image"])
    conf = os.path.join(conf_dir, "nginx.conf")
    with open(conf, "w") as f:
        f.write("pid %s/nginx.pid; error_log %s/error.log; events {}\n"
                "http { access_log %s/access.log; server { listen 127.0.0.1:%d; root %s; } }\n" % (conf_dir, conf_dir, conf_dir, port, images))
    proc = subprocess.Popen(["nginx", "-c", conf, "-p", conf_dir, "-g", "daemon off;"], stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port, os.path.join(conf_dir, "access.log")


def varnish_service(vcl_path, origin_port):
    port, varnish_dir = free_port(), os.path.join(work, "varnish")
    os.makedirs(varnish_dir)
    vcl = open(vcl_path).read()
    backend = re.compile(r'\.host = "origin"; \.port = "80";')
    check(backend.search(vcl), "default.vcl's backend is not origin:80")
    with open(os.path.join(varnish_dir, "default.vcl"), "w") as f:
        f.write(backend.sub('.host = "127.0.0.1"; .port = "%d";' % origin_port, vcl))
    proc = subprocess.Popen(["varnishd", "-F", "-j", "none", "-a", "127.0.0.1:%d" % port, "-n", varnish_dir,
                             "-f", os.path.join(varnish_dir, "default.vcl")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, timeout=30)
    return proc, port


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        proc.send_signal(sig)
        proc.wait(timeout=30)


def main():
    os.makedirs(CACHE, exist_ok=True)
    stages = dockerfile_stages(os.path.join(ROOT, "Dockerfile"))
    check([name for _, name, _ in stages] == ["build", ""], "the Dockerfile's stages are not build, then the image")
    out = build_stage(stages[0][0], stages[0][2], work)
    rootfs = os.path.join(work, "rootfs")
    base_root(stages[1][0], rootfs)
    image = Image(stages[1][2], out, rootfs, work)

    compose_dir = os.path.join(ROOT, "config", "compose")
    services = yaml.safe_load(open(os.path.join(compose_dir, "compose.yaml")))["services"]
    images = os.path.join(work, "images")
    shutil.copytree(os.path.join(compose_dir, "images"), images)
    os.chmod(work, 0o755)  # nginx's workers run as www-data
    pyvips.Image.black(640, 480, bands=3).draw_rect([200, 90, 40], 0, 0, 320, 480, fill=True).pngsave(os.path.join(images, "tile.png"))
    origin, origin_port, access_log = origin_service(services["origin"], images)
    varnish, varnish_port = varnish_service(os.path.join(compose_dir, "default.vcl"), origin_port)
    daemons = []
    try:
        for name in ("thumbd-a", "thumbd-b"):
            service = services[name]
            check(service.get("build") == "../..", "%s is not built from the Dockerfile" % name)
            environment = {key: str(value).replace("http://varnish:80", "http://127.0.0.1:%d" % varnish_port)
                           for key, value in service["environment"].items()}
            daemons.append(Container(image, name, environment, image.volume_dir(name), free_port()))
        a, b = daemons
        check(a.healthy() and b.healthy(), "the health check fails while thumbd serves")
        path = "/thumb?url=http%3A%2F%2Forigin%2Ftile.png&w=64&h=48&format=png"
        for daemon in daemons:
            status, headers, body = daemon.get(path, host=daemon.name)
            check(status == 200, "%s answered %d: %s" % (daemon.name, status, body[:300]))
            thumb = pyvips.Image.new_from_buffer(body, "")
            check((thumb.width, thumb.height) == (64, 48), "%s made %dx%d, not 64x48" % (daemon.name, thumb.width, thumb.height))
        fetched = [line for line in open(access_log) if "/tile.png" in line]
        check(len(fetched) == 1, "the origin served tile.png %d times, not once: %s" % (len(fetched), fetched))
        status, _, body = a.get(path, host="thumbd-c")
        check(status == 421, "a Host not listed got %d, not 421: %s" % (status, body[:200]))
        check(a.stop() == 0, "thumbd-a did not stop cleanly on its STOPSIGNAL")
        check(not a.healthy(), "the health check passes with thumbd stopped")
        stop(varnish)
        stop(origin, signal.SIGQUIT)
        a.start()
        status, headers, _ = a.get(path, host=a.name)
        check(status == 200 and headers.get("X-Thumbd-Cache") == "hit", "restarted without Varnish, thumbd-a answered %d (%s): its volume lost the cache" % (status, headers.get("X-Thumbd-Cache")))
        print("   the image built, ran as %s, healthy; two behind Varnish: the origin asked once; 421 for a name not listed; "
              "stopped by %s, its volume kept the cache" % (image.user, image.stop_signal.name))
    finally:
        for daemon in daemons:
            stop(daemon.proc)
        stop(varnish)
        stop(origin, signal.SIGQUIT)


main()
