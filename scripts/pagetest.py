#!/usr/bin/env python3
"""thumbd's own page (GET /) in headless Chromium over the DevTools protocol, against
daemons this script starts and the test origin the smoke test started:

1. tiles are asked at their laid-out size and asked again when they grow;
2. captions name the file;
3. a tile whose image fails to load after `done` is marked failed (the request is failed
   through the DevTools Fetch domain: the daemon cannot be made to break a cache hit);
4. with signing on, the page's tiles load (the daemon signs their src);
5. a daemon restarted under an open page: the page says so, reconnects, ends full;
6. focus: the page does not repeat the screen its POST named, and names a new screen as
   soon as the user scrolls to it;
7. under thumbnails.onlyPresets, the page asks with its preset;
8. /thumbd.js on a page of another origin (one listed in server.allowedOrigins, served on
   another port): the same grid in a few lines; a page of an origin not listed is refused;
9. warm: a grid whose tiles are all cached fills from the POST's answer (its events come in
   it, end included) without opening the event stream;
10. the module's painter (its own source, on a clock the test moves): a change after a quiet
   spell goes at the next frame, the next within 50 ms waits for its group, and a tile loaded
   on screen goes at the next frame, taking what waits with it.

Usage: pagetest.py THUMBD_BINARY ORIGIN WORKDIR
"""
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchpeers import free_port  # noqa: E402
from pagelib import Daemon as _Daemon, Scenarios, check, serve_page, wait  # noqa: E402

binary, origin, work = sys.argv[1:4]


def Daemon(name, port=None, env=None):
    return _Daemon(binary, work, name, port=port, env=env)


ENDED = "document.body.dataset.batch === 'ended'"
STATES = "[...document.querySelectorAll('.tile')].map(t => t.dataset.state + ':' + (t.dataset.loaded || ''))"
scenarios = Scenarios(work)


daemon = Daemon("plain")
tiles = ["%s/real/page-%d.png" % (origin, i) for i in range(8)]


def sizing(browser):
    """tiles asked at their laid-out size, again when they grow (one still loading too); captions name the file"""
    # The noisy tile is too large to come inline: its image request is held (DevTools Fetch)
    # until the window has narrowed, so the tiles grow while that tile is still loading.
    browser.call("Fetch.enable", patterns=[{"urlPattern": "*/thumb?url=*noise*", "requestStage": "Request"}])
    held, releasing = [], [False]

    def release():
        while releasing[0] and held:
            browser.ws.send(json.dumps({"id": 2 * 10 ** 6 + len(held), "method": "Fetch.continueRequest",
                                        "params": {"requestId": held.pop()}}))

    def hold(event):
        if event["method"] == "Fetch.requestPaused":
            held.append(event["params"]["requestId"])
        release()

    browser.call("Page.navigate", url=daemon.page(tiles + ["%s/file/noise.png" % origin]))
    wait(browser, ENDED, on_event=hold)
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        wait(browser, "true", on_event=hold)
        time.sleep(0.05)
    check(held, "the noisy tile's image was not asked")
    laid_out = browser.evaluate("Math.round(document.querySelector('.frame').getBoundingClientRect().width * devicePixelRatio)")
    asked = int(browser.evaluate("document.getElementById('grid').dataset.side"))
    check(asked >= laid_out, "asked %d for tiles of %d px" % (asked, laid_out))
    captions = browser.evaluate("[...document.querySelectorAll('.caption')].map(c => c.textContent)")
    check(captions == ["page-%d.png" % i for i in range(8)] + ["noise.png"], "captions: %s" % captions)
    # A narrower window: three columns of larger tiles.
    browser.call("Emulation.setDeviceMetricsOverride", width=620, height=900, deviceScaleFactor=1, mobile=False)
    grown = int(wait(browser, "+document.getElementById('grid').dataset.side > %d && document.getElementById('grid').dataset.side" % (asked * 1.1), on_event=hold))
    releasing[0] = True
    release()
    wait(browser, "[...document.querySelectorAll('.frame img:not(.preview)')].filter(i => i.complete && i.naturalWidth >= %d).length === 9" % grown, on_event=hold)
    browser.call("Fetch.disable")


def broken_after_done(browser):
    """a tile whose image fails to load after done is marked failed"""
    browser.call("Fetch.enable", patterns=[{"urlPattern": "*/thumb?url=*noise*", "requestStage": "Request"}])

    def fail_tiles(event):
        if event["method"] == "Fetch.requestPaused":
            browser.ws.send(json.dumps({"id": 10 ** 6 + len(event["params"]["requestId"]), "method": "Fetch.failRequest",
                                        "params": {"requestId": event["params"]["requestId"], "errorReason": "Failed"}}))

    browser.call("Page.navigate", url=daemon.page(["%s/file/noise.png" % origin, tiles[0]]))
    wait(browser, ENDED + " && [...document.querySelectorAll('.tile')].every(t => t.dataset.loaded)", on_event=fail_tiles)
    states = browser.evaluate(STATES)
    check(states == ["failed:0", "done:1"], "states: %s" % states)
    wait(browser, "document.getElementById('status').textContent.startsWith('1 done, 1 failed')")


def signed(browser):
    """with signing on, the page's tiles load: the daemon signs their src"""
    keyed = Daemon("signed", env={"THUMBD_SIGNING_KEYS": "page-test-key-0123456789"})
    try:
        browser.call("Page.navigate", url=keyed.page(tiles[:3] + ["%s/file/noise.png" % origin]))
        wait(browser, ENDED + " && [...document.querySelectorAll('.tile')].every(t => t.dataset.loaded)")
        states = browser.evaluate(STATES)
        check(states == ["done:1"] * 4, "states: %s" % states)
    finally:
        keyed.stop()


def restart(browser):
    """a daemon restarted under an open page: the page says so, reconnects and ends with a full grid"""
    restarting = Daemon("restart")
    gated = "%s/gate/page-restart" % origin
    try:
        browser.call("Page.navigate", url=restarting.page(tiles[:4] + [gated]))
        wait(browser, "document.querySelectorAll('.tile[data-state=done]').length === 4")
        restarting.stop()
        wait(browser, "document.getElementById('status').textContent.includes('reconnecting')")
        restarting.start()
        urllib.request.urlopen("%s/__release/page-restart" % origin).read()
        wait(browser, ENDED + " && [...document.querySelectorAll('.tile')].every(t => t.dataset.loaded)")
        states = browser.evaluate(STATES)
        check(states == ["done:1"] * 5, "states: %s" % states)
    finally:
        restarting.stop()


def focus(browser):
    """the page names a new screen at once when scrolled, and does not repeat the one its POST named"""
    gates = ["focus-%d-%d" % (os.getpid(), i) for i in range(60)]
    told = []

    def record(event):
        request = event["params"].get("request", {}) if event["method"] == "Network.requestWillBeSent" else {}
        if request.get("url", "").endswith("/focus"):
            told.append(json.loads(request["postData"])["items"])

    try:
        browser.call("Page.navigate", url=daemon.page(["%s/gate/%s" % (origin, gate) for gate in gates]))
        wait(browser, "document.querySelectorAll('[data-index]').length === 60", on_event=record)
        # Two frames: the observer has made its first report (what the POST named), and a
        # fetch it made would have been sent.
        browser.call("Runtime.evaluate", awaitPromise=True, expression=(
            "new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 200))))"))
        wait(browser, "true", on_event=record)
        check(told == [], "the page repeated the POST's screen: %s" % told)
        browser.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        deadline = time.monotonic() + 10
        while not told and time.monotonic() < deadline:
            time.sleep(0.05)
            wait(browser, "true", on_event=record)
        check(len(told) >= 1 and 59 in told[0] and 0 not in told[0], "focus sent after the scroll: %s" % told)
    finally:
        for gate in gates:
            urllib.request.urlopen("%s/__release/%s" % (origin, gate)).read()


def presets(browser):
    """under thumbnails.onlyPresets the page asks every tile with a preset (thumbnails.pagePreset, else the first by name)"""
    only = Daemon("presets", env={"THUMBD_THUMBNAILS_PRESETS": json.dumps({"b-tile": {"w": 90, "h": 90, "fit": "cover"},
                                                                          "a-tile": {"w": 120, "h": 120, "fit": "cover"}}),
                                  "THUMBD_THUMBNAILS_ONLY_PRESETS": "true"})
    try:
        for preset, side in ((None, 120), ("b-tile", 90)):
            if preset:
                only.stop()
                only.env["THUMBD_THUMBNAILS_PAGE_PRESET"] = preset
                only.start()
            browser.call("Page.navigate", url=only.page(tiles[:3]))
            wait(browser, ENDED + " && [...document.querySelectorAll('.tile')].every(t => t.dataset.loaded)")
            states = browser.evaluate(STATES)
            check(states == ["done:1"] * 3, "states with %s: %s" % (preset, states))
            sizes = browser.evaluate("[...document.querySelectorAll('.frame img:not(.preview)')].map(i => i.naturalWidth)")
            check(sizes == [side] * 3, "sizes with %s: %s" % (preset, sizes))
    finally:
        only.stop()


FOREIGN_PAGE = """<!doctype html><meta charset="utf-8"><title>my page</title>
<div id="tiles"></div><p id="said"></p>
<script type="module">
  import { createGrid } from "http://127.0.0.1:%(port)d/thumbd.js";
  const grid = createGrid({ grid: document.querySelector("#tiles"), status: document.querySelector("#said"),
                            onEnd: (ok) => { document.body.dataset.end = ok ? "ok" : "failed"; } });
  grid.start(%(urls)s);
</script>
"""


def foreign_page(port, urls, page_port):
    """Serves FOREIGN_PAGE on page_port (another origin)."""
    return serve_page(FOREIGN_PAGE % {"port": port, "urls": json.dumps(urls)}, page_port)[0]


def module(browser):
    """/thumbd.js on a page of an allowed origin: its grid fills, a failure marked; not listed: refused"""
    page_port = free_port()
    allowed = Daemon("module", env={"THUMBD_SERVER_ALLOWED_ORIGINS": "http://127.0.0.1:%d" % page_port})
    server = foreign_page(allowed.port, tiles[:4] + ["%s/status/404" % origin], page_port)
    try:
        browser.call("Page.navigate", url="http://127.0.0.1:%d/" % page_port)
        wait(browser, "document.body.dataset.end === 'failed' && [...document.querySelectorAll('.tile')].every(t => t.dataset.state === 'failed' || t.dataset.loaded)")
        states = browser.evaluate(STATES)
        check(states == ["done:1"] * 4 + ["failed:"], "states: %s" % states)
        sizes = browser.evaluate("[...document.querySelectorAll('.frame img')].map(i => i.naturalWidth)")
        check(len(sizes) == 4 and all(w > 0 for w in sizes), "images: %s" % sizes)
        check(browser.evaluate("document.querySelector('#said').textContent").startswith("4 done, 1 failed"), "status line")
        check(browser.evaluate("!!document.getElementById('thumbd-grid-style')"), "the tiles' style was not added")
    finally:
        server.shutdown()
        allowed.stop()
    # The same page, its origin not in server.allowedOrigins: the module cannot even load.
    other_port = free_port()
    server = foreign_page(daemon.port, tiles[:1], other_port)
    try:
        browser.call("Page.navigate", url="http://127.0.0.1:%d/" % other_port)
        time.sleep(1.5)
        check(browser.evaluate("document.querySelectorAll('.tile').length") == 0, "a page of an origin not listed made tiles")
    finally:
        server.shutdown()


def warm(browser):
    """a grid of cached tiles fills from the POST's answer, without opening the event stream"""
    fresh = Daemon("warm")
    asked = []

    def record(event):
        if event["method"] == "Network.requestWillBeSent":
            asked.append(event["params"]["request"]["url"])

    try:
        browser.call("Page.navigate", url=fresh.page(tiles[:4]))
        wait(browser, ENDED + " && [...document.querySelectorAll('.tile')].every(t => t.dataset.loaded)")
        # Once the store holds the 4 originals, tiles and previews, the same grid again.
        deadline = time.monotonic() + 20
        while json.load(urllib.request.urlopen("http://127.0.0.1:%d/stats" % fresh.port))["objects"] < 12:
            check(time.monotonic() < deadline, "the cold grid's objects were not stored within 20 s")
            time.sleep(0.05)
        browser.events.clear()  # what the cold visit's page asked
        browser.call("Page.navigate", url=fresh.page(tiles[:4]) + "&again=1")
        wait(browser, ENDED + " && [...document.querySelectorAll('.tile')].every(t => t.dataset.loaded)", on_event=record)
        states = browser.evaluate(STATES)
        check(states == ["done:1"] * 4, "states: %s" % states)
        check(browser.evaluate("document.getElementById('status').textContent").startswith("4 done, 0 failed"), "status line")
        check(any(url.endswith("/batches") for url in asked), "no batch was posted: %s" % asked)
        check(not any("/events" in url or "/thumb?" in url for url in asked), "a warm grid asked more than its batch: %s" % asked)
    finally:
        fresh.stop()


# The module's painter, taken from the /thumbd.js the daemon serves and run on a clock and
# frames the test moves (in about:blank, so no page's policy forbids `new Function`).
PAINTER = """(() => {
  let now = 0, next = 1;
  const timers = new Map(), frames = new Map(), applied = [];
  const painter = new Function("setTimeout", "clearTimeout", "requestAnimationFrame", "cancelAnimationFrame",
                               "performance", %s + "\\nreturn painter;")(
    (f, ms) => { timers.set(next, [now + ms, f]); return next++; }, (id) => timers.delete(id),
    (f) => { frames.set(next, f); return next++; }, (id) => frames.delete(id), { now: () => now });
  const frame = () => { const due = [...frames.values()]; frames.clear(); due.forEach((f) => f(now)); };
  const advance = (to) => {
    for (;;) {
      const [id, [at, f]] = [...timers].sort((a, b) => a[1][0] - b[1][0])[0] || [0, [Infinity]];
      if (at > to) break;
      timers.delete(id); now = at; f();
    }
    now = to;
  };
  const paint = painter();
  const change = (name) => () => applied.push([name, now]);
  paint(change("quiet"));              // after a quiet spell: the next frame
  advance(16); frame();
  paint(change("grouped"));            // 34 ms of its group left: it waits
  advance(20); frame();
  paint(change("on screen"), true);    // a tile loaded on screen: the next frame, the waiting one with it
  advance(32); frame();
  paint(change("after"));              // right after: a group of its own, 50 ms after the last
  advance(48); frame();
  advance(200);
  return JSON.stringify(applied);
})()"""


def painter(browser):
    """the painter: a tile loaded on screen goes at the next frame, not behind the 50 ms group"""
    with urllib.request.urlopen("http://127.0.0.1:%d/thumbd.js" % daemon.port) as r:
        module_source = r.read().decode()
    start = module_source.index("function painter()")
    end, depth = module_source.index("{", start), 0
    while True:  # to its closing brace (it holds no brace in a string or comment)
        depth += {"{": 1, "}": -1}.get(module_source[end], 0)
        end += 1
        if depth == 0:
            break
    source = module_source[start:end]
    applied = json.loads(browser.evaluate(PAINTER % json.dumps(source)))
    expected = [["quiet", 16], ["grouped", 32], ["on screen", 32], ["after", 82]]
    check(applied == expected, "applied (change, ms): %s, expected %s" % (applied, expected))


try:
    for test in (sizing, broken_after_done, signed, restart, focus, presets, module, warm, painter):
        scenarios.run(test)
finally:
    daemon.stop()
scenarios.finish()
