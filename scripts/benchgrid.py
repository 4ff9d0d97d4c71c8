#!/usr/bin/env python3
"""The product's own scene, measured in a browser: a grid of 120 web photos in headless
Chromium (1280x900), driven over the DevTools protocol, loaded three ways:

  direct   <img> straight at the originals
  <img>    <img src="/thumb?url=…&w=160&h=160&format=auto"> through thumbd
  page     thumbd's own page (GET /): a batch, its event stream, previews, focus
  element  a page of the origin's (another origin than thumbd's, listed in
           server.allowedOrigins) whose tiles are <thumbd-img> elements from /thumbd.js

The photos (60 of 4000x3000 and 60 of 1200x800, each distinct) are made here with libvips,
and served by an origin started here with 60 ms of latency before each answer and ~4 MB/s
per connection. Every page has the same layout (thumbd's page, its grid filled statically
for the two <img> pages), so each shows the same tiles on its first screen.

  first screen   the last tile visible at load (scrolled to the top) has loaded its image
  all            every tile has loaded its image
  bottom screen  the page is scrolled to the bottom as soon as its tiles exist; the last
                 tile visible there has loaded
  cold           a new thumbd cache and a new browser profile
  warm           thumbd's cache filled by a cold run; a new browser profile

A tile counts when its final image (not a preview) has fired `load`. Every figure is the
median of `--rounds` runs (3). thumbd runs with its shipped settings.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchbrowser import load  # noqa: E402
from benchgridorigin import Origin, cpu_line, floors, make_photos, screen_cpu  # noqa: E402
from benchpeers import free_port, wait_port  # noqa: E402
from benchgridpages import TILE, StaticTiles, element_page, nginx_version, static_page  # noqa: E402



# MARK: thumbd

class Thumbd:
    def __init__(self, binary, work, name, env=None):
        self.port = free_port()
        config = os.path.join(work, "empty.yaml")
        with open(config, "w") as f:
            f.write("{}\n")
        self.db = os.path.join(work, name + ".sqlite")
        env = dict(os.environ, THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS="true", THUMBD_LOG_LEVEL="warning", **(env or {}))
        self.proc = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:%d" % self.port, "--db", self.db,
                                      "--config", config], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def cpu_seconds(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


# MARK: The pages

def median(rows, key):
    return statistics.median(row[key] for row in rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--thumbd", default=".build/release/thumbd")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-elements", dest="elements", action="store_false",
                        help="leave out the <thumbd-img> page (a release before it)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="thumbd-benchgrid-")
    photos_dir = os.path.join(work, "photos")
    os.makedirs(photos_dir)
    print("making 120 photos (60 of 4000x3000, 60 of 1200x800)...", file=sys.stderr, flush=True)
    names = make_photos(photos_dir, 60, 60)
    total_bytes = sum(os.path.getsize(os.path.join(photos_dir, n)) for n in names)

    # The thumbd page's HTML is the template of the two <img> pages.
    template_daemon = Thumbd(args.thumbd, work, "template")
    with urllib.request.urlopen(template_daemon.url("/")) as r:
        template = r.read().decode()
    with urllib.request.urlopen(template_daemon.url("/thumbd.js")) as r:
        module = r.read().decode()
    template_daemon.stop()
    # The tiles' style, as the module carries it (a JSON string).
    style = json.JSONDecoder().raw_decode(module, module.index("const style = ") + len("const style = "))[0]

    origin = Origin(photos_dir)
    download, tile_cpu = floors(origin, names, args.rounds)
    static = StaticTiles(work, photos_dir, names)
    count = len(names)
    results = {}
    cpu = []
    daemons = []
    try:
        urls = [origin.url(n) for n in names]
        with open(os.path.join(photos_dir, "direct.html"), "w") as f:
            f.write(static_page(template, urls, style))
        with open(os.path.join(photos_dir, "static.html"), "w") as f:
            f.write(static_page(template, [static.url(i) for i in range(len(names))], style))

        def thumb_page(daemon):
            """A page on the origin (a third party's page using thumbd) whose tiles are /thumb URLs."""
            sources = [daemon.url("/thumb?url=%s&w=%d&h=%d&format=auto" % (urllib.parse.quote(u, safe=""), TILE, TILE))
                       for u in urls]
            name = "thumb-%d.html" % daemon.port
            with open(os.path.join(photos_dir, name), "w") as f:
                f.write(static_page(template, sources, style))
            return origin.url(name)

        def elements(daemon):
            """A page on the origin whose tiles are <thumbd-img> (one batch for the page)."""
            name = "elements-%d.html" % daemon.port
            with open(os.path.join(photos_dir, name), "w") as f:
                f.write(element_page(template, urls, style, daemon.url("")))
            return origin.url(name)

        # The element page is of another origin than thumbd's: its module and batch need
        # that origin in server.allowedOrigins (nothing else differs from the shipped settings).
        allowed = {"THUMBD_SERVER_ALLOWED_ORIGINS": origin.url("").rstrip("/")}

        def run(label, url, scroll=False, paste=None, daemon=None):
            row = load(work, url, count, scroll=scroll, paste=paste, server=daemon.proc.pid if daemon else None)
            results.setdefault(label, []).append(row)
            print("  %-22s first %.2f s  all %.2f s  bottom %.2f s  %.1f MB  (%d tiles on the first screen)" % (
                label, row["first"], row["all"], row["bottom"], row["bytes"] / 1e6, row["first_tiles"]),
                file=sys.stderr, flush=True)

        def fresh(name, env=None):
            daemon = Thumbd(args.thumbd, work, name, env)
            daemons.append(daemon)
            return daemon

        for round_ in range(args.rounds):
            print("round %d" % (round_ + 1), file=sys.stderr, flush=True)
            run("direct", origin.url("direct.html"))
            run("direct, scrolled", origin.url("direct.html"), scroll=True)
            run("static tiles (nginx)", origin.url("static.html"))
            daemon = fresh("img-%d" % round_)
            run("<img> cold", thumb_page(daemon))
            run("<img> warm", thumb_page(daemon))
            daemon.stop()
            daemon = fresh("img-scroll-%d" % round_)
            run("<img> cold, scrolled", thumb_page(daemon), scroll=True)
            daemon.stop()
            daemon = fresh("page-%d" % round_)
            before = daemon.cpu_seconds()
            run("page cold", daemon.url("/"), paste=urls, daemon=daemon)
            cpu.append((daemon.cpu_seconds() - before) / count)
            run("page warm", daemon.url("/"), paste=urls)
            daemon.stop()
            daemon = fresh("page-scroll-%d" % round_)
            run("page cold, scrolled", daemon.url("/"), scroll=True, paste=urls)
            daemon.stop()
            if args.elements:
                daemon = fresh("elements-%d" % round_, allowed)
                run("element cold", elements(daemon))
                run("element warm", elements(daemon))
                daemon.stop()
                daemon = fresh("elements-scroll-%d" % round_, allowed)
                run("element cold, scrolled", elements(daemon), scroll=True)
                daemon.stop()
    finally:
        origin.stop()
        static.stop()
        for daemon in daemons:
            if daemon.proc.poll() is None:
                daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(results, cpu, total_bytes, download, tile_cpu, names)


def report(results, cpu, total_bytes, download, tile_cpu, names):
    decode = tile_cpu["4000x3000"]
    def m(label, key):
        return median(results[label], key)

    print()
    print("### A grid of 120 photos in headless Chromium (1280x900; origin: 60 ms latency, ~4 MB/s a connection; "
          "%.0f MB of originals; median of %d)" % (total_bytes / 1e6, len(results["direct"])))
    print()
    print("| how the page loads the grid | cold: first screen s | cold: all s | warm: all s | scrolled to the bottom at once: bottom screen s | bytes to the browser MB |")
    print("|---|---|---|---|---|---|")
    print("| `<img>` straight at the originals | %.2f | %.2f | (no cache: = cold) | %.2f | %.1f |" % (
        m("direct", "first"), m("direct", "all"), m("direct, scrolled", "bottom"), m("direct", "bytes") / 1e6))
    print("| `<img>` through `/thumb?w=160&h=160&format=auto` | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
        m("<img> cold", "first"), m("<img> cold", "all"), m("<img> warm", "all"), m("<img> cold, scrolled", "bottom"),
        m("<img> cold", "bytes") / 1e6))
    print("| thumbd's own page (batch + SSE + previews + focus) | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
        m("page cold", "first"), m("page cold", "all"), m("page warm", "all"), m("page cold, scrolled", "bottom"),
        m("page cold", "bytes") / 1e6))
    if "element cold" in results:
        print("| `<thumbd-img>` elements on a page of another origin (one batch + SSE + previews + focus) | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
            m("element cold", "first"), m("element cold", "all"), m("element warm", "all"), m("element cold, scrolled", "bottom"),
            m("element cold", "bytes") / 1e6))
        print()
        print("| `<thumbd-img>` page / thumbd's own page | cold: first screen | cold: all | warm: all | scrolled: bottom screen |")
        print("|---|---|---|---|---|")
        print("| ratio (target: within 1.10) | %.2f | %.2f | %.2f | %.2f |" % (
            m("element cold", "first") / m("page cold", "first"), m("element cold", "all") / m("page cold", "all"),
            m("element warm", "all") / m("page warm", "all"), m("element cold, scrolled", "bottom") / m("page cold, scrolled", "bottom")))
    print()
    # The grid's targets (the page beside the direct one; the warm pages in seconds, the
    # thumbd page never slower than the plain <img> one).
    print("| target | thumbd | direct | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    rows = [
        ("page cold: first screen", m("page cold", "first"), m("direct", "first"), 0.40),
        ("page cold: all tiles", m("page cold", "all"), m("direct", "all"), 0.45),
        ("page, scrolled at once: bottom screen", m("page cold, scrolled", "bottom"), m("direct, scrolled", "bottom"), 0.28),
    ]
    for label, ours, theirs, target in rows:
        ratio = ours / theirs
        print("| %s | %.2f s | %.2f s | %.2f | <= %.2f | %s |" % (label, ours, theirs, ratio, target, "yes" if ratio <= target else "no"))
    page_warm, img_warm = m("page warm", "all"), m("<img> warm", "all")
    print("| page warm: all tiles | %.2f s | - | - | <= 0.40 s | %s |" % (page_warm, "yes" if page_warm <= 0.4 else "no"))
    print("| page warm beside the <img> page's warm | %.2f s | %.2f s | %.2f | <= 1.00 | %s |" % (
        page_warm, img_warm, page_warm / img_warm, "yes" if page_warm <= img_warm else "no"))
    print()
    print("The floor of a warm grid through plain <img>, measured here: the same page with its 120 tiles as static "
          "files served by nginx %s (the fastest answer an HTTP/1.1 server gives) loads all of them in %.2f s; "
          "thumbd's <img> page, %.2f s." % (nginx_version(), m("static tiles (nginx)", "all"), m("<img> warm", "all")))
    print()
    # Where a warm grid's time goes: what thumbd does (the POST's answer, the events) is a
    # small part; the rest is the browser's (loading the page and the module, the events'
    # handling, decoding the tiles, painting them).
    print("| warm, median s from navigation | batch posted | its answer | last done event | last tile image loaded | all tiles shown |")
    print("|---|---|---|---|---|---|")
    for label, name in (("page warm", "thumbd's own page"), ("element warm", "`<thumbd-img>` page")):
        if label in results:
            print("| %s | %.3f | %.3f | %.3f | %.3f | %.3f |" % (name, m(label, "post"), m(label, "answered"), m(label, "last_done"),
                                                             m(label, "last_image"), m(label, "all")))
    print()
    print("thumbd CPU per tile, cold page (fetch, check, store, resize, encode): %.1f ms (median of %d)" % (
        statistics.median(cpu) * 1000, len(cpu)))
    cores = os.cpu_count() or 1

    def floor_line(screen, when, named, direct, tiles):
        """No screen holding a 4000x3000 photo can come before `named` (when the page asks for
        it) + one original's download + its tile's CPU; nor before `named` + libvips's CPU for
        all of the screen's `tiles` spread over every core (the browser's own CPU left out)."""
        floor = named + download + decode
        big = sum(1 for i in tiles if "4000x3000" in names[i])
        work = screen_cpu(tiles, tile_cpu, names)
        print()
        print("The floor of the %s, measured here: %s at %.2f s; one 4000x3000 original takes %.2f s to arrive over one "
              "connection; libvips makes its tile in %.0f ms of CPU. No such screen can come before "
              "%.2f s: %.2f of the direct page's." % (screen, when, named, download, decode * 1000, floor, floor / direct))
        print("Its %d tiles (%d of 4000x3000, %.0f ms of libvips CPU each; %d of 1200x800, %.0f ms) take %.2f s of CPU, "
              "%.2f s on %d cores: with the download, no such screen can come before %.2f s, %.2f of the direct page's." % (
                  len(tiles), big, tile_cpu["4000x3000"] * 1000, len(tiles) - big, tile_cpu["1200x800"] * 1000, work,
                  work / cores, cores, max(floor, named + work / cores), max(floor, named + work / cores) / direct))

    first_tiles = results["page cold"][0]["first_indices"]
    floor_line("page's cold first screen", "the page posts its batch (loaded, URLs pasted)", m("page cold", "post"),
               m("direct", "first"), first_tiles)
    cpu_line(results["page cold"], cores, m("page cold", "post"), m("direct", "first"), tile_cpu, names)
    focus = [row["focus"] for row in results["page cold, scrolled"] if row["focus"] is not None]
    if focus:
        floor_line("scrolled page's bottom screen", "the page names the bottom screen to thumbd (scrolled at once)",
                   statistics.median(focus), m("direct, scrolled", "bottom"), results["page cold, scrolled"][0]["bottom_indices"])

if __name__ == "__main__":
    main()
