"""What the browser tests share (scripts/pagetest.py, scripts/elementtest.py): a daemon they
start and stop by PID, a page of another origin served on a port of its own, waiting for a
condition in the page, and scenarios that each report and run in a fresh browser."""
import http.server
import os
import subprocess
import threading
import time
import urllib.parse

from benchpeers import free_port, wait_port
from benchbrowser import Browser


class Daemon:
    """`thumbd serve` on a free port with a database of its own under `work`."""

    def __init__(self, binary, work, name, port=None, env=None):
        self.binary = binary
        self.port = port or free_port()
        self.db = os.path.join(work, name + ".sqlite")
        self.log = open(os.path.join(work, name + ".log"), "ab")
        self.env = dict(os.environ, THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS="true", **(env or {}))
        self.start()

    def start(self):
        self.proc = subprocess.Popen([self.binary, "serve", "--listen", "127.0.0.1:%d" % self.port, "--db", self.db],
                                     env=self.env, stdout=self.log, stderr=self.log)
        wait_port(self.port)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def page(self, urls):
        return "http://127.0.0.1:%d/?autostart=1&urls=%s" % (self.port, urllib.parse.quote("\n".join(urls), safe=""))


def wait(browser, expression, seconds=60, on_event=None, say=None):
    """Evaluates `expression` in the page until it is truthy (its value), at most `seconds`.
    `say`: an expression whose value the timeout's message shows."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = browser.evaluate(expression)
        if on_event:
            for event in browser.events:
                on_event(event)
            browser.events.clear()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting for: %s\nthe page: %s" % (expression, browser.evaluate(say) if say else ""))


def until(predicate, seconds=10):
    """`predicate()` once it is truthy, else its value after `seconds`: for what another process
    learns after the page does (the origin sees a transfer's abort after the daemon has told
    the page that the tile is cancelled)."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.05)


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def serve_page(body, port=None):
    """Serves `body` (HTML) at every path of 127.0.0.1:port (a plain static server: another
    origin than the daemon's). Returns the server (`shutdown()`) and its port."""
    port = port or free_port()
    data = body.encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, port


class Scenarios:
    """Runs each scenario in a new browser; every one reports, then `finish` fails if any did."""

    def __init__(self, work):
        self.work = work
        self.failures = []

    def run(self, function, name=None):
        name = name or function.__doc__
        browser = Browser(self.work)
        try:
            function(browser)
            print("   ok: %s" % name)
        except Exception as error:  # noqa: BLE001 - every scenario reports, then the script fails
            self.failures.append("%s: %s" % (name, error))
        finally:
            browser.close()

    def finish(self):
        if self.failures:
            raise SystemExit("\n".join("   FAILED: " + f for f in self.failures))
