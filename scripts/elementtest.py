#!/usr/bin/env python3
"""<thumbd-img> and openBatch on a page of another origin, in headless Chromium over the
DevTools protocol, against daemons this script starts and the test origin the smoke test
started:

1. 200 elements: one POST names the first screen, whose tiles are all made before any other;
   every element fires load (a 404 fires error); half replaced by a re-render asks nothing
   again; elements added after the batch ended go into a new one;
2. scrolling away cancels the tiles still downloading, and scrolling back asks them again;
   a page scrolled while its batch's POST is still unanswered names its new screen once the
   answer comes;
3. a daemon restarted under the page: its stream resumes, no tile is lost;
4. openBatch: typed events in order as an async iterator, and an AbortSignal that cancels
   the batch on the daemon; /thumbd.d.ts declares every export of the module;
5. a signed setup (each element carries the sig its page's server made) and an onlyPresets
   setup (elements ask with a preset).

Usage: elementtest.py THUMBD_BINARY ORIGIN WORKDIR
"""
import json
import os
import sys
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elementpage import STATES, Pages, signature  # noqa: E402
from pagelib import Scenarios, check, until, wait  # noqa: E402

binary, origin, work = sys.argv[1:4]
scenarios = Scenarios(work)

pages = Pages(binary, origin, work)
with_page, origin_stats = pages.with_page, pages.origin_stats


def elements_scene(browser):
    """200 elements: the first screen asked first and made first; load and error; a re-render asks nothing twice; later ones join a new batch"""
    tag = "el%d" % os.getpid()
    urls = ["%s/img/%s-%d.jpg" % (origin, tag, i) for i in range(200)]
    urls[7] = "%s/status/404" % origin
    elements = [{"src": u, "width": 300, "height": 200, "alt": "photo %d" % i} for i, u in enumerate(urls)]

    def scene(daemon, page):
        browser.call("Page.navigate", url=page)
        wait(browser, "window.events && events.length === 200", say="JSON.stringify([events.length, %s])" % STATES)
        screen = browser.evaluate("visible()")
        check(0 < len(screen) < 100 and 7 in screen, "on screen: %s" % screen)
        posts = browser.evaluate("asked.filter(([m, p]) => m === 'POST')")
        check([p for _, p, _ in posts] == ["/batches"], "one POST for the page's elements: %s" % [p for _, p, _ in posts])
        body = json.loads(posts[0][2])
        check(sorted(body["focus"]) == sorted(screen), "the POST named %s, the screen is %s" % (body["focus"], screen))
        check(len(body["items"]) == 200 and body["cancelOffscreen"] is True, "the POST's items")
        done = browser.evaluate("doneAt")
        last_on_screen = max(done[str(i)] for i in screen if i != 7)
        first_off = min(t for i, t in done.items() if int(i) not in screen)
        check(last_on_screen <= first_off, "a tile off screen was made before the screen's last (%.0f > %.0f ms)" % (last_on_screen, first_off))
        events = browser.evaluate("events")
        check(sorted(i for i, e in events if e == "load") == [i for i in range(200) if i != 7], "load events")
        check([i for i, e in events if e == "error"] == [7], "error events: %s" % [i for i, e in events if e == "error"])
        failure = browser.evaluate("document.querySelector('[data-i=\"7\"]').failure")
        check(failure and failure["error"] == "upstream_not_found" and failure["status"] == 404, "failure: %s" % failure)
        check(browser.evaluate("document.querySelector('[data-i=\"0\"]').currentSrc").startswith("http://127.0.0.1:%d/thumb?" % daemon.port), "currentSrc")
        # A re-render: the second half replaced by new elements asking the same.
        browser.evaluate("""(() => {
          const list = document.getElementById('list');
          [...list.children].slice(100).forEach((el) => el.remove());
          for (let i = 100; i < 200; i++) list.appendChild(make(1000 + i, ELEMENTS[i]));
        })()""")
        wait(browser, "events.filter(([i, e]) => i >= 1100 && e === 'load').length === 100")
        posts = browser.evaluate("asked.filter(([m, p]) => m === 'POST').map(([m, p]) => p)")
        check(posts == ["/batches"], "the re-render asked again: %s" % posts)
        stats = origin_stats()["requests"]
        twice = [u for u in urls if urllib.parse.urlsplit(u).path.startswith("/img/") and stats.get(urllib.parse.urlsplit(u).path) != 1]
        check(not twice, "origin asked %d URLs other than once: %s" % (len(twice), twice[:3]))
        # Elements that come after the batch ended (its stream said end): a new batch takes them.
        browser.evaluate("""(() => {
          for (let i = 0; i < 3; i++) document.getElementById('list').prepend(make(2000 + i, { src: '%s/img/%s-late-' + i + '.jpg', width: 300, height: 200 }));
        })()""" % (origin, tag))
        wait(browser, "events.filter(([i, e]) => i >= 2000 && e === 'load').length === 3")
        posts = browser.evaluate("asked.filter(([m, p]) => m === 'POST').map(([m, p]) => p)")
        check(posts == ["/batches", "/batches"], "after the end: %s" % posts)

    with_page("elements", elements, {"THUMBD_BATCHES_SCREEN_FIRST_MILLISECONDS": "20000"}, scene)


def scrolling(browser):
    """scrolling away cancels the tiles still downloading; scrolling back asks them again and they load"""
    tag = "sc%d" % os.getpid()
    urls = ["%s/gate/%s-%d" % (origin, tag, i) for i in range(4)] + ["%s/img/%s-%d.jpg" % (origin, tag, i) for i in range(4, 80)]
    elements = [{"src": u, "width": 300, "height": 200} for u in urls]

    def scene(daemon, page):
        browser.call("Page.navigate", url=page)
        wait(browser, "window.events && events.length === 76", say=STATES)  # all but the held four
        check(all(origin_stats()["requests"].get("/gate/%s-%d" % (tag, i)) == 1 for i in range(4)), "the held four were asked")
        # Elements added while the batch runs join it (POST …/items) and its stream.
        browser.evaluate("""(() => {
          for (let i = 0; i < 3; i++) document.getElementById('list').appendChild(make(500 + i, { src: '%s/img/%s-added-' + i + '.jpg', width: 300, height: 200 }));
        })()""" % (origin, tag))
        wait(browser, "events.filter(([i, e]) => i >= 500 && e === 'load').length === 3", say=STATES)
        posts = browser.evaluate("asked.filter(([m, p]) => m === 'POST' && !p.endsWith('/focus')).map(([m, p]) => p.replace(/[0-9a-f]{32}/, 'ID'))")
        check(posts == ["/batches", "/batches/ID/items"], "while it runs: %s" % posts)
        browser.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        wait(browser, "[0, 1, 2, 3].every((i) => document.querySelector(`[data-i=\"${i}\"]`).getAttribute('state') === 'cancelled')",
             seconds=30, say=STATES)
        check(until(lambda: all(origin_stats()["aborted"].get("/gate/%s-%d" % (tag, i), 0) >= 1 for i in range(4))),
              "the transfers were not aborted: %s" % origin_stats()["aborted"])
        for i in range(4):
            urllib.request.urlopen("%s/__release/%s-%d" % (origin, tag, i)).read()
        browser.evaluate("window.scrollTo(0, 0)")
        wait(browser, "events.length === 83", seconds=30, say=STATES)
        check(sorted(i for i, e in browser.evaluate("events") if e == "load") == list(range(80)) + [500, 501, 502], "loads")

    with_page("scrolling", elements, {}, scene)


def scrolled_before_answer(browser):
    """a page scrolled while its POST is unanswered names the new screen as soon as the answer comes"""
    tag = "sb%d" % os.getpid()
    urls = ["%s/gate/%s-%d" % (origin, tag, i) for i in range(60)]
    elements = [{"src": u, "width": 300, "height": 200} for u in urls]
    held = []

    def hold(event):
        # The batch's POST is held (its CORS preflight goes on) until the page has scrolled.
        if event["method"] == "Fetch.requestPaused":
            if event["params"]["request"]["method"] == "POST":
                held.append(event["params"]["requestId"])
            else:
                browser.ws.send(json.dumps({"id": 3 * 10 ** 6 + len(held), "method": "Fetch.continueRequest",
                                            "params": {"requestId": event["params"]["requestId"]}}))

    def scene(daemon, page):
        browser.call("Fetch.enable", patterns=[{"urlPattern": "*/batches", "requestStage": "Request"}])
        try:
            browser.call("Page.navigate", url=page)
            wait(browser, "true", on_event=hold)
            deadline = 0
            while not held and deadline < 100:
                wait(browser, "true", on_event=hold)
                deadline += 1
            check(held, "the batch's POST was not sent")
            browser.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
            screen = wait(browser, "(() => { const v = visible(); return v.length && !v.includes(0) && v; })()", on_event=hold)
            # Two frames: the elements' observer has seen the new screen, with the POST unanswered.
            browser.call("Runtime.evaluate", awaitPromise=True, expression=(
                "new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 200))))"))
            browser.call("Fetch.continueRequest", requestId=held[0])
            told = wait(browser, "(() => { const f = asked.filter(([m, p]) => p.endsWith('/focus')); return f.length && JSON.parse(f[f.length - 1][2]).items; })()",
                        seconds=10, on_event=hold, say="JSON.stringify(asked.map(([m, p]) => p))")
            check(sorted(told) == sorted(screen), "focus named %s, the screen is %s" % (told, screen))
        finally:
            browser.call("Fetch.disable")
            for i in range(60):
                urllib.request.urlopen("%s/__release/%s-%d" % (origin, tag, i)).read()

    with_page("scrolled", elements, {}, scene)


def restart(browser):
    """a daemon restarted under an open page of elements: the stream resumes and no tile is lost"""
    tag = "rs%d" % os.getpid()
    elements = [{"src": "%s/img/%s-%d.jpg" % (origin, tag, i), "width": 300, "height": 200} for i in range(3)]
    elements.append({"src": "%s/gate/%s" % (origin, tag), "width": 300, "height": 200})

    def scene(daemon, page):
        browser.call("Page.navigate", url=page)
        wait(browser, "window.events && events.length === 3", say=STATES)
        check(origin_stats()["requests"].get("/gate/%s" % tag) == 1, "the held one was asked")
        daemon.stop()
        daemon.start()
        urllib.request.urlopen("%s/__release/%s" % (origin, tag)).read()
        wait(browser, "events.length === 4", seconds=60, say=STATES)
        check(sorted(browser.evaluate("events")) == [[i, "load"] for i in range(4)], "events: %s" % browser.evaluate("events"))
        posts = browser.evaluate("asked.filter(([m, p]) => m === 'POST' && !p.endsWith('/focus')).map(([m, p]) => p)")
        check(posts == ["/batches"], "the page asked again: %s" % posts)

    with_page("restart", elements, {}, scene)


BATCH_SCRIPT = """(async () => {
  const server = "http://127.0.0.1:%(port)d";
  const typed = [];
  const batch = thumbd.openBatch(["%(origin)s/img/ob-%(tag)s.jpg", { url: "%(origin)s/status/404", id: "missing" }],
                                 { w: 64, h: 64, fit: "cover", format: "png" });
  let src = "";
  for await (const e of batch) { typed.push(e.type + (e.index === undefined ? "" : ":" + e.index)); if (e.type === "done") src = e.src; }
  const tile = await fetch(src);
  const controller = new AbortController();
  const held = thumbd.openBatch(["%(origin)s/gate/ob-%(tag)s"], { signal: controller.signal });
  let outcome = "ended";
  try {
    for await (const e of held) if (e.type === "open") setTimeout(() => controller.abort(), 300);
  } catch (e) { outcome = e.name; }
  let snapshot;
  for (let i = 0; i < 100; i++) {
    snapshot = await (await fetch(server + "/batches/" + held.id)).json();
    if (snapshot.state === "finished") break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const types = await (await fetch(server + "/thumbd.d.ts")).text();
  const undeclared = Object.keys(thumbd).filter((name) => !new RegExp("export declare (function|class) " + name + "\\\\b").test(types));
  return { typed, tile: [tile.status, tile.headers.get("content-type")], outcome, cancelled: snapshot.counts.cancelled,
           deleted: asked.some(([m, p]) => m === "DELETE" && p === "/batches/" + held.id), undeclared };
})()"""


def open_batch(browser):
    """openBatch: typed events in order, an AbortSignal cancels on the daemon; /thumbd.d.ts declares every export"""
    tag = str(os.getpid())

    def scene(daemon, page):
        browser.call("Page.navigate", url=page)
        wait(browser, "!!window.thumbd")
        result = browser.call("Runtime.evaluate", awaitPromise=True, returnByValue=True,
                              expression=BATCH_SCRIPT % {"port": daemon.port, "origin": origin, "tag": tag})
        got = result.get("result", {}).get("value")
        check(got, "the script failed: %s" % result)
        typed = got["typed"]
        outcomes = [t for t in typed[1:-1] if not t.startswith("progress")]
        check(typed[0] == "open" and typed[-1] == "end" and sorted(outcomes) == ["done:0", "failed:1"], "events: %s" % typed)
        check(got["tile"] == [200, "image/png"], "the done's src: %s" % got["tile"])
        check(got["outcome"] == "AbortError" and got["deleted"] and got["cancelled"] == 1, "abort: %s" % got)
        check(got["undeclared"] == [], "not in /thumbd.d.ts: %s" % got["undeclared"])
        urllib.request.urlopen("%s/__release/ob-%s" % (origin, tag)).read()

    with_page("openbatch", [], {}, scene)


def signed_and_presets(browser):
    """signed elements (each sig made by the page's server) load, a wrong sig fails; under onlyPresets, preset elements load"""
    key = "element-test-key-0123456789"
    urls = ["%s/img/sg%d-%d.jpg" % (origin, os.getpid(), i) for i in range(4)]
    elements = [{"src": u, "width": 160, "height": 120, "fit": "cover", "format": "png",
                 "sig": signature(key, {"url": u, "w": 160, "h": 120, "fit": "cover", "format": "png"})} for u in urls]
    elements[3]["sig"] = signature("another-key-0123456789", {"url": urls[3], "w": 160, "h": 120, "fit": "cover", "format": "png"})

    def signed_scene(daemon, page):
        browser.call("Page.navigate", url=page)
        wait(browser, "window.events && events.length === 4", say=STATES)
        check(sorted(browser.evaluate("events")) == [[0, "load"], [1, "load"], [2, "load"], [3, "error"]], "events: %s" % browser.evaluate("events"))
        check(browser.evaluate("document.querySelector('[data-i=\"3\"]').failure.error") == "bad_signature", "the wrong sig's failure")

    with_page("signed", elements, {"THUMBD_SIGNING_KEYS": key}, signed_scene)
    preset = [{"src": "%s/img/pr%d-%d.jpg" % (origin, os.getpid(), i), "width": 120, "height": 120, "preset": "tile"} for i in range(3)]
    preset.append({"src": "%s/img/pr%d-x.jpg" % (origin, os.getpid()), "width": 120, "height": 120})

    def preset_scene(daemon, page):
        browser.call("Page.navigate", url=page)
        wait(browser, "window.events && events.length === 4", say=STATES)
        check(sorted(browser.evaluate("events")) == [[0, "load"], [1, "load"], [2, "load"], [3, "error"]], "events: %s" % browser.evaluate("events"))
        check(browser.evaluate("document.querySelector('[data-i=\"3\"]').failure.error") == "bad_parameter", "without a preset")
        size = browser.evaluate("(() => { const img = document.querySelector('[data-i=\"0\"]').shadowRoot.querySelector('img:not(.preview)'); return [img.naturalWidth, img.naturalHeight]; })()")
        check(size == [96, 96], "the preset's size: %s" % size)

    with_page("presets", preset, {"THUMBD_THUMBNAILS_PRESETS": json.dumps({"tile": {"w": 96, "h": 96, "fit": "cover"}}),
                                  "THUMBD_THUMBNAILS_ONLY_PRESETS": "true"}, preset_scene)


for test in (elements_scene, scrolling, scrolled_before_answer, restart, open_batch, signed_and_presets):
    scenarios.run(test)
scenarios.finish()
