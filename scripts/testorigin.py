#!/usr/bin/env python3
"""A local origin for thumbd's tests and bench. Behaviour is chosen by path (like
async-http-client's HTTPBin); it counts requests per path and notices clients that hang up.

    /img/NAME.jpg?size=N&delay=MS&cc=CACHE-CONTROL   a real 8x8 JPEG padded to N bytes (distinct per NAME)
    /png/NAME.png?size=N                             a real 8x8 PNG padded to N bytes
    /garbage.png                                     a PNG signature followed by noise
    /file/NAME                                       what the test stored with PUT /__put/NAME (?etag=E: with
                                                     `ETag: E`, sent as given)
    /file/NAME?delay=MS&chunk=B&every=MS&cut=N        the same, after MS ms, B bytes every MS ms; with cut,
                                                     the connection closes after N bytes (a download cut short);
                                                     with hold=NAME, after its first chunk until GET /__release/NAME;
                                                     with tail=NAME, before its last chunk until GET /__release/NAME
    /real/NAME.png                                   a real, decodable 96x96 PNG (colour from NAME)
    /status/CODE                                     that status, a small body
    /not-an-image                                    200, claims image/jpeg, sends HTML
    /truncated                                       Content-Length 10000, sends 100 bytes, closes
    /redirect/N                                      N redirects, then an image
    /big?size=N  /big-chunked?size=N                 an image of N bytes (with / without length)
    /slow?size=N&chunk=B&every=MS                    sends B bytes every MS ms
    /hang                                            never answers (bounded: 60 s)
    /gate/NAME                                       waits for GET /__release/NAME, then an image
    /hostile/KIND?…                                  a broken or malicious response (see HOSTILE)
    /__stats                     {"requests": {path: n}, "aborted": {path: n}, "order": [path, ...],
                                  "connections": how many client connections made counted requests}

Prints "PORT <n>" on its first line. Listens on 127.0.0.1 only (or $TESTORIGIN_HOST). Exits when stdin closes.
"""
import hashlib
import json
import os
import select
import socket
import sys
import struct
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import realimage  # noqa: E402
from hostileorigin import hostile  # noqa: E402

FILES = {}  # PUT /__put/NAME stores a body; GET /file/NAME serves it
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

LOCK = threading.Lock()
REQUESTS = {}
ABORTED = {}
ORDER = []
ANSWERED = {}
NOT_MODIFIED = {}
PEERS = set()  # the client addresses (connections) counted requests came on
PROXIED = []  # absolute-form request targets (thumbd's upstream.proxy pointed here)  # path -> how many conditional requests were answered 304
GATES = {}


def count(table, key):
    with LOCK:
        table[key] = table.get(key, 0) + 1


def gate(name):
    with LOCK:
        return GATES.setdefault(name, threading.Event())


def image_bytes(name, size, kind="jpeg"):
    """A real image (8x8) of about `size` bytes, distinct per name (realimage.py)."""
    return realimage.jpeg(name, size) if kind == "jpeg" else realimage.png(name, size)


def garbage_png(size=4096):
    """A PNG signature followed by noise: sniffs as PNG, is not an image."""
    return b"\x89PNG\r\n\x1a\n" + hashlib.sha256(b"garbage").digest() * (size // 32)


def real_png(name, side=96):
    h = hashlib.sha256(name.encode()).digest()
    base = (h[0], h[1], h[2])
    rows = bytearray()
    for y in range(side):
        rows.append(0)
        for x in range(side):
            t = (x + y) / (2 * side)
            rows += bytes(int(c * (0.55 + 0.45 * t)) for c in base)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(rows), 6)) + chunk(b"IEND", b""))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def client_gone(self):
        """True when the client closed its side (readable and EOF)."""
        try:
            ready, _, _ = select.select([self.connection], [], [], 0)
            if ready:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True
        return False

    def wait(self, seconds, path, until=None):
        """Sleeps up to `seconds`, returning False (and counting an abort) if the client leaves."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until is not None and until.is_set():
                return True
            if self.client_gone():
                count(ABORTED, path)
                return False
            time.sleep(0.01)
        return until is None

    def trickle(self, body, chunk, every, path, hold=None, tail=None):
        """Writes `body` `chunk` bytes at a time, `every` seconds apart; with `hold` waits
        after the first chunk for GET /__release/HOLD, with `tail` before the last chunk for
        GET /__release/TAIL. False (an abort counted) when the client left."""
        try:
            for i in range(0, len(body), chunk):
                last = i + chunk >= len(body)
                if last and i > 0 and tail is not None and not self.wait(60, path, until=gate(tail)):
                    return False
                self.wfile.write(body[i:i + chunk])
                self.wfile.flush()
                if i == 0 and hold is not None and not self.wait(60, path, until=gate(hold)):
                    return False
                if not self.wait(every, path):
                    return False
        except OSError:
            count(ABORTED, path)
            return False
        return True

    def send(self, status, body, ctype="image/jpeg", extra=(), length=True):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if length:
            self.send_header("Content-Length", str(len(body)))
        else:
            self.send_header("Transfer-Encoding", "chunked")
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        if length:
            self.wfile.write(body)
            self.wfile.flush()
            with LOCK:
                ANSWERED[urlsplit(self.path).path] = time.monotonic()
        else:
            for i in range(0, len(body), 16384):
                part = body[i:i + 16384]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")

    def do_PUT(self):
        url = urlsplit(self.path)
        if not url.path.startswith("/__put/"):
            return self.send(404, b"no such path\n", "text/plain")
        length = int(self.headers.get("Content-Length", "0"))
        with LOCK:
            FILES[url.path[len("/__put/"):]] = self.rfile.read(length)
        return self.send(200, b"stored\n", "text/plain")

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urlsplit(self.path)
        path, q = url.path, {k: v[0] for k, v in parse_qs(url.query).items()}
        size = int(q.get("size", "12288"))
        if path == "/__stats":
            with LOCK:
                body = json.dumps({"requests": REQUESTS, "aborted": ABORTED, "order": ORDER,
                                   "answered": ANSWERED, "notModified": NOT_MODIFIED,
                                   "proxied": PROXIED, "connections": len(PEERS)}).encode()
            return self.send(200, body, "application/json")
        if path.startswith("/__release/"):
            gate(path[len("/__release/"):]).set()
            return self.send(200, b"released\n", "text/plain")
        if not self.headers.get("X-Test-Direct"):  # the tests' own reference fetches do not count
            count(REQUESTS, path)
            with LOCK:
                ORDER.append(path)
                PEERS.add(self.client_address)
                if self.path.startswith("http://"):  # absolute form: we were asked as a proxy
                    PROXIED.append(self.path)
        extra = [("Cache-Control", q["cc"])] if "cc" in q else []
        if path.startswith("/img/"):
            if "delay" in q and not self.wait(int(q["delay"]) / 1000.0, path):
                return
            return self.send(200, image_bytes(path, size), "image/jpeg", extra)
        if path.startswith("/real/"):
            if "delay" in q and not self.wait(int(q["delay"]) / 1000.0, path):
                return
            return self.send(200, real_png(path), "image/png", extra)
        if path.startswith("/validated/"):
            # A real PNG (or the body PUT under the same name) with validators: ETag from
            # the bytes, a fixed Last-Modified; a matching If-None-Match gets 304.
            name = path[len("/validated/"):]
            with LOCK:
                body = FILES.get(name)
            body = body if body is not None else real_png(path)
            etag = '"%s"' % hashlib.sha1(body).hexdigest()[:16]
            headers = [("ETag", etag), ("Last-Modified", "Mon, 02 Nov 2026 10:00:00 GMT"),
                       ("Cache-Control", q.get("cc", "max-age=1"))]
            if "delay" in q and not self.wait(int(q["delay"]) / 1000.0, path):
                return
            if "gate" in q and REQUESTS.get(path, 0) > 1 and not self.wait(60, path, until=gate(q["gate"])):
                return  # a gate holds every request after the first, until released
            if self.headers.get("If-None-Match") == etag:
                count(NOT_MODIFIED, path)
                self.send_response(304)
                if "cc304" in q:  # the 304 may renew with a lifetime of its own
                    headers[2] = ("Cache-Control", q["cc304"])
                for name_, value in headers:
                    self.send_header(name_, value)
                self.end_headers()
                return
            return self.send(200, body, "image/png", headers)
        if path.startswith("/png/"):
            return self.send(200, image_bytes(path, size, "png"), "image/png", extra)
        if path == "/garbage.png":
            return self.send(200, garbage_png(), "image/png", extra)
        if path.startswith("/file/"):
            with LOCK:
                body = FILES.get(path[len("/file/"):])
            if body is None:
                return self.send(404, b"no such file\n", "text/plain")
            if "delay" in q and not self.wait(int(q["delay"]) / 1000.0, path):
                return
            if "chunk" in q:
                chunk, every = int(q["chunk"]), int(q.get("every", "10")) / 1000.0
                end = int(q.get("cut", len(body)))
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not self.trickle(body[:end], chunk, every, path, q.get("hold"), q.get("tail")):
                    return
                if end < len(body):
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            return self.send(200, body, "application/octet-stream", extra + ([("ETag", q["etag"])] if "etag" in q else []))
        if path.startswith("/status/"):
            code = int(path.split("/")[2])
            return self.send(code, b'{"origin": "says %d"}' % code, "application/json")
        if path == "/not-an-image":
            return self.send(200, b"<html><body>surprise</body></html>", "image/jpeg")
        if path == "/truncated":
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", "10000")
            self.end_headers()
            self.wfile.write(image_bytes(path, 100))
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if path.startswith("/redirect/"):
            n = int(path.split("/")[2])
            if n == 0:
                return self.send(200, image_bytes(path, size))
            self.send_response(302)
            self.send_header("Location", "/redirect/%d" % (n - 1))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/big":
            return self.send(200, image_bytes(path, size))
        if path == "/big-chunked":
            return self.send(200, image_bytes(path, size), length=False)
        if path == "/slow":
            chunk, every = int(q.get("chunk", "1024")), int(q.get("every", "100")) / 1000.0
            body = image_bytes(path, size)
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.trickle(body, chunk, every, path)
            return
        if path == "/hang":
            self.wait(60, path)
            return
        if path.startswith("/hostile/"):
            return hostile(self, path[len("/hostile/"):], q)
        if path.startswith("/gate/"):
            if self.wait(60, path, until=gate(path[len("/gate/"):])):
                return self.send(200, image_bytes(path, size), "image/jpeg", extra)
            return
        return self.send(404, b"no such path\n", "text/plain")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 4096  # the default (5) stalls a hundred simultaneous connects

    def handle_error(self, request, client_address):
        pass  # clients hanging up (tests do that on purpose) are not errors here


def main():
    host = os.environ.get("TESTORIGIN_HOST", "127.0.0.1")  # another local address, in a test's own netns
    server = Server((host, int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
    print("PORT %d" % server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sys.stdin.read()  # the parent closing our stdin (or dying) stops us
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
