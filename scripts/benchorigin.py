#!/usr/bin/env python3
"""The origin for scripts/bench: one asyncio event loop, keep-alive, no thread per
connection, so that it is not the bottleneck of the proxies it measures (the test origin,
scripts/testorigin.py, spawns a thread per connection and could not serve 100 concurrent
delayed requests at the rate the fan-out scenario needs).

    /img/NAME?delay=MS&size=N   an image after MS milliseconds (asyncio.sleep)
    /gate/NAME                  waits until GET /__release/NAME
    /file/NAME/TAG              the file NAME of $BENCH_FILES (TAG makes distinct URLs), with
                                the ETag and Last-Modified nginx would send for it
    /validated/NAME?cc=CC&delay=MS
                                an image with ETag and Last-Modified, Cache-Control CC; a
                                matching If-None-Match is answered 304 (counted)
    any path with ?fault=PCT    that share of answers is faulty at random: a 503, a body cut
                                short, or bytes that are not an image (thirds each)
    /__stats                    {"requests": {path: n}, "received": {path: monotonic seconds},
                                 "answered": {path: monotonic seconds}, "notModified": {path: n},
                                 "faults": {kind: n}} (times of the last request for the path)

Absolute-form request targets (from a proxy) are understood.

Prints "PORT <n>"; exits when stdin closes.
"""
import asyncio
import email.utils
import json
import os
import random
import sys
import time
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import realimage  # noqa: E402

REQUESTS, RECEIVED, ANSWERED, GATES, NOT_MODIFIED, FAULTS = {}, {}, {}, {}, {}, {}
VALIDATOR = b'"v1-bench"'
LAST_MODIFIED = b"Mon, 02 Nov 2026 10:00:00 GMT"
BODIES = {}


def body_of(size):
    if size not in BODIES:
        BODIES[size] = realimage.jpeg("bench", size)  # a real JPEG: thumbd checks bodies with libvips
    return BODIES[size]


def file_of(name):
    """(body, validators): a file's bytes with the ETag and Last-Modified a static file server
    sends (nginx's ETag: the file's mtime and size in hex)."""
    if name not in BODIES:
        path = os.path.join(os.environ["BENCH_FILES"], os.path.basename(name))
        with open(path, "rb") as f:
            body = f.read()
        stat = os.stat(path)
        BODIES[name] = (body, b'ETag: "%x-%x"\r\nLast-Modified: %s\r\n' % (
            int(stat.st_mtime), len(body), email.utils.formatdate(stat.st_mtime, usegmt=True).encode()))
    return BODIES[name]


def gate(name):
    return GATES.setdefault(name, asyncio.Event())


async def respond(writer, status, body, ctype, extra=b""):
    writer.write(b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" % (status, ctype, len(body), extra)
                 + body)
    await writer.drain()


CONNECTIONS = 0


def count(table, key):
    table[key] = table.get(key, 0) + 1


def header(head, name):
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return b""


async def handle(reader, writer):
    global CONNECTIONS
    CONNECTIONS += 1
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            target = head.split(b" ", 2)[1].decode()
            url = urlsplit(target)
            path, q = url.path, {k: v[0] for k, v in parse_qs(url.query).items()}
            if path == "/__stats":
                stats = {"connections": CONNECTIONS, "requests": REQUESTS, "received": RECEIVED, "answered": ANSWERED, "notModified": NOT_MODIFIED, "faults": FAULTS}
                await respond(writer, 200, json.dumps(stats).encode(), b"application/json")
                continue
            if path.startswith("/__release/"):
                gate(path[len("/__release/"):]).set()
                await respond(writer, 200, b"released\n", b"text/plain")
                continue
            REQUESTS[path] = REQUESTS.get(path, 0) + 1
            RECEIVED[path] = time.monotonic()  # its head read whole: the request is ours from here
            if path.startswith("/gate/"):
                await gate(path[len("/gate/"):]).wait()
            elif "delay" in q:
                await asyncio.sleep(int(q["delay"]) / 1000.0)
            ANSWERED[path] = time.monotonic()  # as the answer starts, so nothing of ours precedes it
            if "fault" in q and random.random() * 100 < float(q["fault"]):
                kind = random.choice(["status", "truncated", "garbage"])
                count(FAULTS, kind)
                if kind == "status":
                    await respond(writer, 503, b"busy\n", b"text/plain")
                elif kind == "garbage":
                    await respond(writer, 200, b"<html>not an image</html>" * 40, b"image/jpeg")
                else:
                    body = body_of(int(q.get("size", "12288")))
                    writer.write(b"HTTP/1.1 200 X\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % len(body)
                                 + body[:len(body) // 2])
                    await writer.drain()
                    break  # and close: the body is cut short
                continue
            if path.startswith("/validated/"):
                cc = q.get("cc", "max-age=2").encode()
                validators = b"ETag: %s\r\nLast-Modified: %s\r\nCache-Control: %s\r\n" % (VALIDATOR, LAST_MODIFIED, cc)
                if VALIDATOR in [v.strip() for v in header(head, b"if-none-match").split(b",")]:
                    count(NOT_MODIFIED, path)
                    writer.write(b"HTTP/1.1 304 Not Modified\r\n%s\r\n" % validators)
                    await writer.drain()
                    continue
                await respond(writer, 200, body_of(int(q.get("size", "12288"))), b"image/jpeg", validators)
                continue
            if path.startswith("/file/"):  # /file/NAME/ANYTHING: $BENCH_FILES/NAME (scripts/benchthumbs.py)
                body, validators = file_of(path.split("/")[2])
                await respond(writer, 200, body, b"image/jpeg", validators)
                continue
            await respond(writer, 200, body_of(int(q.get("size", "12288"))), b"image/jpeg")
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
    print("PORT %d" % server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # the parent closing stdin stops us


if __name__ == "__main__":
    asyncio.run(main())
