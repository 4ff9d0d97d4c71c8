"""Headless Chromium driven over the DevTools protocol, one tab at 1280x900: the grid bench's
and the page test's browser. `load` opens a page and reports when each tile's final image
has loaded (first screen, all, bottom screen when scrolled)."""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

WIDTH, HEIGHT = 1280, 900


# When each tile's final image has loaded: an <img> in the document firing `load` (the
# static pages), or thumbd's page marking the tile `data-loaded="1"` (it swaps the loaded
# image in for the preview, so the image loads before it is in the document).
RECORDER = """
// thumbd's pages: when each done event reached the page and each tile's image had loaded
// (the phases of a warm grid: POST, its answer, the events, the images, the tiles shown).
window.__done = [];
window.__images = [];
const EventSource0 = window.EventSource;
window.EventSource = Object.assign(function (url, options) {
  const source = new EventSource0(url, options);
  source.addEventListener('done', () => window.__done.push(performance.now()));
  return source;
}, { CONNECTING: 0, OPEN: 1, CLOSED: 2 });
// A batch's done dispatched by /thumbd.js (from the stream or from the POST's answer).
window.__batchDone = [];
const dispatch0 = EventTarget.prototype.dispatchEvent;
EventTarget.prototype.dispatchEvent = function (event) {
  if (event.type === 'done' && 'index' in event) window.__batchDone.push(performance.now());
  return dispatch0.call(this, event);
};
const Image0 = window.Image;
window.Image = function () {
  const image = new Image0(...arguments);
  image.addEventListener('load', () => { if (image.className !== 'preview') window.__images.push(performance.now()); });
  return image;
};
window.__loads = {};
window.__post = null;  // when thumbd's page posts its batch (the page has loaded and been given its URLs)
window.__focus = [];   // when it tells thumbd what is on screen (POST /batches/<id>/focus)
const fetch0 = window.fetch;
window.fetch = function (url, options) {
  // Relative (the page before 0.10) or absolute (/thumbd.js posts to its server's URL).
  if (String(url).endsWith('/batches') && window.__post === null) window.__post = performance.now();
  if (String(url).endsWith('/focus')) window.__focus.push(performance.now());
  return fetch0.apply(this, arguments);
};
const mark = (tile) => {
  const i = +tile.dataset.index;
  if (!(i in window.__loads)) window.__loads[i] = performance.now();
};
document.addEventListener('load', (e) => {
  const img = e.target;
  // An <img>, or a <thumbd-img> (its image is in its shadow root; it fires load itself).
  if (!img || !(img.tagName === 'IMG' || img.tagName === 'THUMBD-IMG') || (img.tagName === 'IMG' && img.src.startsWith('data:'))) return;
  const tile = img.closest('[data-index]');
  if (tile) mark(tile);
}, true);
new MutationObserver((records) => {
  for (const r of records) if (r.target.dataset && r.target.dataset.loaded === '1' && r.target.dataset.index !== undefined) mark(r.target);
}).observe(document, { subtree: true, attributes: true, attributeFilter: ['data-loaded'] });
"""


class Browser:
    """One headless Chromium with a new profile, one tab, 1280x900."""

    def __init__(self, work):
        import websocket
        self.profile = tempfile.mkdtemp(dir=work, prefix="profile-")
        self.proc = subprocess.Popen(
            ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
             "--user-data-dir=" + self.profile, "--window-size=%d,%d" % (WIDTH, HEIGHT), "--no-first-run",
             "--disable-background-networking", "--disable-extensions", "--hide-scrollbars", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
            if time.monotonic() > deadline:
                raise RuntimeError("chromium did not start")
            time.sleep(0.05)
        port = int(open(port_file).read().split()[0])
        with urllib.request.urlopen("http://127.0.0.1:%d/json" % port) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events = []
        self.call("Page.enable")
        self.call("Network.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False)
        self.call("Page.addScriptToEvaluateOnNewDocument", source=RECORDER)

    def call(self, method, **params):
        self.next_id += 1
        ident = self.next_id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError("%s: %s" % (method, message["error"]))
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def bytes_received(self):
        """Bytes over the network per request: its total once it finished, else what its
        chunks said so far (an event stream still open)."""
        self.call("Runtime.evaluate", expression="0")  # collects the events sent meanwhile
        finished, chunks = {}, {}
        for e in self.events:
            p = e["params"]
            if e["method"] == "Network.loadingFinished":
                finished[p["requestId"]] = p.get("encodedDataLength", 0)
            elif e["method"] == "Network.dataReceived":
                chunks[p["requestId"]] = chunks.get(p["requestId"], 0) + max(p.get("encodedDataLength", 0), p.get("dataLength", 0))
        return sum(finished.get(r, chunks.get(r, 0)) for r in set(finished) | set(chunks))

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


class CpuSampler:
    """Every 50 ms while a page loads: the machine's busy and total CPU time (/proc/stat), the
    browser's (see `browser_ticks`) and the server's (`server`, a pid: thumbd), to tell a
    screen that waits for the network from one that waits for CPU, and whose."""

    def __init__(self, root, server=None):
        self.root, self.server, self.samples, self.stopped = root, server, [], threading.Event()
        self.parents, self.ticks = {}, {}  # every process seen: its parent; the browser's: their CPU
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    @staticmethod
    def stat(pid):
        """(name, fields after it) of /proc/PID/stat, or None once it has exited."""
        try:
            with open("/proc/%d/stat" % pid) as f:
                name, rest = f.read().split("(", 1)[1].rsplit(")", 1)
                return name, rest.split()
        except (OSError, IndexError, ValueError):
            return None

    def browser_ticks(self):
        """The browser's processes: its own, its children, and any named like it (its zygote
        forks renderers that are then parented elsewhere). Each new process is looked at once;
        only the browser's are read again (one that exited keeps the CPU it last showed)."""
        for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
            if pid not in self.parents:
                seen = self.stat(pid)
                self.parents[pid] = int(seen[1][1]) if seen else 0
                if seen and (seen[0].startswith("chrom") or self.parents[pid] in self.ticks or self.parents[pid] == self.root):
                    self.ticks.setdefault(pid, 0)
        self.ticks.setdefault(self.root, 0)
        for pid in self.ticks:
            seen = self.stat(pid)
            if seen:
                self.ticks[pid] = int(seen[1][11]) + int(seen[1][12])
        return sum(self.ticks.values())

    def run(self):
        while not self.stopped.is_set():
            with open("/proc/stat") as f:  # user nice system idle iowait irq softirq steal (guest: in user)
                user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
            busy = user + nice + system + irq + softirq
            server = self.stat(self.server) if self.server else None
            self.samples.append((time.monotonic(), busy + idle + iowait + steal, busy, self.browser_ticks(), steal,
                                 int(server[1][11]) + int(server[1][12]) if server else 0))
            self.stopped.wait(0.05)

    def window(self, start, end):
        """From `start` to `end` (monotonic): the share of every core that was busy here and
        the share the hypervisor gave to other machines (steal), and the CPU seconds the
        browser took, the server took, and everything else took."""
        self.stopped.set()
        self.thread.join()
        a = min(self.samples, key=lambda x: abs(x[0] - start))
        b = min(self.samples, key=lambda x: abs(x[0] - end))
        total, busy, browser, steal, server = (b[i] - a[i] for i in (1, 2, 3, 4, 5))
        tick = os.sysconf("SC_CLK_TCK")  # /proc/stat's first line sums every core
        return {"busy": busy / max(total, 1), "browser": browser / tick, "server": server / tick,
                "rest": (busy - browser - server) / tick, "steal": steal / max(total, 1)}


# The tiles whose <thumbd-img> was cancelled (scrolled away, with cancelOffscreen).
CANCELLED = "[...document.querySelectorAll('[data-index]')].filter((t) => t.querySelector('thumbd-img[state=cancelled]')).map((t) => +t.dataset.index)"


def load(work, url, count, scroll=False, paste=None, timeout=90, server=None):
    """Loads `url` in a new browser; returns first screen, all, bottom screen (seconds from
    navigation start) and the bytes the browser received. `paste`: URLs to paste into
    thumbd's page and Fetch, as a person does, once it has loaded. `server`: the pid whose
    CPU the first screen's window counts apart (thumbd's)."""
    browser = Browser(work)
    sampler = CpuSampler(browser.proc.pid, server)
    try:
        started = time.monotonic()
        browser.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        if paste:
            while browser.evaluate("document.readyState") != "complete" and time.monotonic() < deadline:
                time.sleep(0.005)
            browser.evaluate("document.getElementById('urls').value = %s; document.getElementById('fetch').click()"
                             % json.dumps("\n".join(paste)))
        scrolled = not scroll
        while time.monotonic() < deadline:
            # Its tiles exist: laid out, numbered or not (thumbd's page numbers its tiles once
            # its batch is answered; waiting for that scrolled it a POST's round trip and a
            # poll later than the pages whose tiles come numbered).
            if not scrolled and (browser.evaluate("document.querySelectorAll('[data-index], .tile').length") or 0) >= count:
                browser.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
                scrolled = True
            # A tile a page cancelled (a <thumbd-img> scrolled away long enough) is settled too.
            if (browser.evaluate("Object.keys(window.__loads || {}).length + " + CANCELLED + ".length") or 0) >= count:
                break
            time.sleep(0.05)
        # Where each tile lies in the document, and the viewport's height.
        layout = browser.evaluate("""(() => {
            const tiles = [...document.querySelectorAll('[data-index]')].map((el) => {
              const r = el.getBoundingClientRect();
              return [+el.dataset.index, r.top + scrollY, r.bottom + scrollY];
            });
            return { tiles, height: document.documentElement.scrollHeight, view: innerHeight,
                     loads: window.__loads || {}, post: window.__post, focus: window.__focus || [],
                     answered: (performance.getEntriesByType('resource').find((e) => /[/]batches$/.test(e.name)) || {}).responseEnd || null,
                     done: (window.__batchDone || []).length ? window.__batchDone : (window.__done || []), images: window.__images || [],
                     cancelled: """ + CANCELLED + """ };
        })()""")
        loads = {int(k): v / 1000.0 for k, v in layout["loads"].items()}
        if len(loads) + len(layout["cancelled"]) < count:
            status = browser.evaluate("(document.getElementById('status') || {}).textContent")
            raise RuntimeError("%s: %d of %d tiles loaded in %d s (the page says: %s)" % (url[:80], len(loads), count, timeout, status))
        view, height = layout["view"], layout["height"]
        first = [i for i, top, bottom in layout["tiles"] if top < view and bottom > 0]
        bottom_screen = [i for i, top, bottom in layout["tiles"] if bottom > height - view]
        first_at = max((loads[i] for i in first if i in loads), default=float("nan"))
        post = (layout["post"] or 0) / 1000.0
        # A cancelled tile (scrolled away) has no load: a screen's time is its loaded tiles'.
        return {
            "first": first_at,
            "all": max(loads.values()),
            "bottom": max((loads[i] for i in bottom_screen if i in loads), default=float("nan")),
            "cancelled": len(layout["cancelled"]),
            "bytes": browser.bytes_received(),
            "first_tiles": len(first),
            "first_indices": first,
            "bottom_indices": bottom_screen,
            "post": post,
            # From its POST to its first screen: the CPU it waited for (the page's clock starts
            # at its navigation, a few ms after `started`).
            "cpu_first": sampler.window(started + post, started + first_at) if first_at == first_at else None,
            # thumbd's pages: the POST answered, the last done event, the last image loaded.
            "answered": (layout["answered"] or 0) / 1000.0,
            "last_done": max(layout["done"], default=0) / 1000.0,
            "last_image": max(layout["images"], default=0) / 1000.0,
            # Scrolled: when the page named the bottom screen to thumbd (its first focus).
            "focus": layout["focus"][0] / 1000.0 if layout["focus"] else None,
        }
    finally:
        sampler.stopped.set()
        browser.close()
