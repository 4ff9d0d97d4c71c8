"""The page of scripts/elementtest.py: a list of <thumbd-img> on an origin of its own, which
records every fetch the module makes and each element's load, error and first done."""
import base64
import hashlib
import hmac
import json
import urllib.parse
import urllib.request

from benchpeers import free_port
from pagelib import Daemon, serve_page

# The page: every fetch the module makes is recorded (asked), and each element's load, error
# and first done (the state attribute) with its time.
PAGE = """<!doctype html><meta charset="utf-8"><title>my list</title>
<style>body { margin: 0 } thumbd-img { margin: 4px }</style>
<div id="list"></div>
<script>
  window.asked = [];
  const realFetch = window.fetch;
  window.fetch = (url, init = {}) => {
    asked.push([init.method || "GET", new URL(url, location.href).pathname, init.body || null]);
    return realFetch(url, init);
  };
  window.events = []; window.doneAt = {};
  new MutationObserver((records) => {
    for (const r of records) if (r.target.getAttribute("state") === "done" && !(r.target.dataset.i in doneAt)) doneAt[r.target.dataset.i] = performance.now();
  }).observe(document, { subtree: true, attributes: true, attributeFilter: ["state"] });
</script>
<script type="module">
  import * as thumbd from "%(server)s/thumbd.js";
  window.thumbd = thumbd;
  window.make = (i, attributes) => {
    const el = document.createElement("thumbd-img");
    el.dataset.i = i;
    for (const [name, value] of Object.entries(attributes)) el.setAttribute(name, value);
    el.addEventListener("load", () => events.push([i, "load"]));
    el.addEventListener("error", () => events.push([i, "error"]));
    return el;
  };
  window.ELEMENTS = %(elements)s;
  ELEMENTS.forEach((attributes, i) => document.getElementById("list").appendChild(make(i, attributes)));
  window.visible = () => [...document.querySelectorAll("thumbd-img")].filter((el) => {
    const r = el.getBoundingClientRect();
    return r.bottom > 0 && r.top < innerHeight;
  }).map((el) => +el.dataset.i);
</script>
"""
STATES = "[...document.querySelectorAll('thumbd-img')].map((el) => el.getAttribute('state'))"


class Pages:
    """The scenes' page, each time on a port of its own beside a daemon of its own."""

    def __init__(self, binary, origin, work):
        self.binary, self.origin, self.work = binary, origin, work

    def origin_stats(self):
        with urllib.request.urlopen(self.origin + "/__stats") as r:
            return json.load(r)

    def with_page(self, name, elements, env, body):
        """Runs body(daemon, page URL) with the page listing `elements`, against a daemon (with
        `env`) that lets the page's origin in."""
        page_port = free_port()
        daemon = Daemon(self.binary, self.work, name,
                        env=dict({"THUMBD_SERVER_ALLOWED_ORIGINS": "http://127.0.0.1:%d" % page_port}, **env))
        server, _ = serve_page(PAGE % {"server": "http://127.0.0.1:%d" % daemon.port, "elements": json.dumps(elements)},
                               page_port)
        try:
            body(daemon, "http://127.0.0.1:%d/" % page_port)
        finally:
            server.shutdown()
            daemon.stop()


def signature(key, params):
    """What the page's own server does for a signed setup: the sig of these parameters (thumbd's
    canonical form, HMAC-SHA256, unpadded base64url)."""
    canonical = "&".join("%s=%s" % (name, urllib.parse.quote(str(value), safe="-._~")) for name, value in sorted(params.items()))
    return base64.urlsafe_b64encode(hmac.new(key.encode(), canonical.encode(), hashlib.sha256).digest()).rstrip(b"=").decode()
