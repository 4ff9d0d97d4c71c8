"""The floors of scripts/bench thumbs: libvips in this process (pyvips, the same library
thumbd links) making the same thumbnail, bare, with thumbd's own steps, and with what a cache
does beside them; CPU and wall milliseconds per thumbnail."""
import os
import socket
import statistics
import time

import pyvips

from benchthumbor import QUALITY, WIDTH


def floor_cpu_ms(data, runs=15):
    """libvips in this process: CPU milliseconds per thumbnail (the same one as floor_ms)."""
    start = time.process_time()
    for _ in range(runs):
        pyvips.Image.thumbnail_buffer(data, WIDTH).jpegsave_buffer(Q=QUALITY, strip=True)
    return (time.process_time() - start) * 1000 / runs


def same_work_cpu_ms(data, runs=15):
    """libvips in this process doing thumbd's own steps: the JPEG decoded at thumbd's shrink
    (the largest of 8, 4, 2 that keeps at least the asked width), thumbnail_image, JPEG
    Q 80 without metadata: CPU milliseconds per thumbnail. thumbd's CPU above this is what
    thumbd adds (fetch, checks, hashes, SQLite, HTTP). The decode here is libvips's loader;
    thumbd decodes the same scale with libjpeg directly, without the loader's own work, so
    it can spend less than this."""
    width = pyvips.Image.new_from_buffer(data, "").width
    shrink = next((s for s in (8, 4, 2) if width / WIDTH >= s), 1)
    start = time.process_time()
    for _ in range(runs):
        image = pyvips.Image.jpegload_buffer(data, shrink=shrink, access="sequential")
        image.thumbnail_image(WIDTH).jpegsave_buffer(Q=QUALITY, strip=True)
    return (time.process_time() - start) * 1000 / runs


def stored_work_cpu_ms(data, directory, runs=15, fetch=None):
    """`same_work_cpu_ms` and what a cache does beside a bare thumbnailer, in this process:
    the ETags (the thumbnail's SHA-256; the original's, from its origin's ETag, which the
    bench origin sends as nginx would: a SHA-256 of a few dozen bytes) and the inserts of
    both into SQLite (the same
    library and thumbd's settings: 16 KB pages, WAL checkpointed past 4 MB, synchronous
    NORMAL): CPU milliseconds per thumbnail. Not in it: the HTTP answer; nor receiving the
    original, unless `fetch` names an origin's (port, path): then each run first receives it
    over one kept-alive loopback connection into a buffer of its length, as little as any
    client does beside the kernel's copy (what thumbd spends beyond this is its own)."""
    import hashlib
    import sqlite3
    path = os.path.join(directory, "steps.sqlite")
    db = sqlite3.connect(path, isolation_level=None)
    for pragma in ("page_size = 16384", "journal_mode = WAL", "wal_autocheckpoint = 256", "synchronous = NORMAL",
                   "secure_delete = FAST"):
        db.execute("PRAGMA " + pragma)
    db.execute("CREATE TABLE objects (key TEXT PRIMARY KEY, body BLOB)")
    width = pyvips.Image.new_from_buffer(data, "").width
    shrink = next((s for s in (8, 4, 2) if width / WIDTH >= s), 1)
    connection = socket.create_connection(("127.0.0.1", fetch[0])) if fetch else None
    start = time.process_time()
    for i in range(runs):
        if connection:
            data = receive(connection, fetch[1])
        hashlib.sha256(b'http://127.0.0.1:8000/file/big.jpg/%d\n"5f0e-%x"\n%d' % (i, len(data), len(data))).digest()
        db.execute("INSERT INTO objects VALUES (?, ?)", ("original-%d" % i, data))
        image = pyvips.Image.jpegload_buffer(data, shrink=shrink, access="sequential")
        made = image.thumbnail_image(WIDTH).jpegsave_buffer(Q=QUALITY, strip=True)
        hashlib.sha256(made).digest()
        db.execute("INSERT INTO objects VALUES (?, ?)", ("variant-%d" % i, made))
    cpu = (time.process_time() - start) * 1000 / runs
    if connection:
        connection.close()
    db.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return cpu


def receive(connection, path):
    """One GET of `path` on a kept-alive connection: the body, received into one buffer of
    its Content-Length (the bench origin always sends one)."""
    connection.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        piece = connection.recv(65536)
        if not piece:
            raise RuntimeError("the origin closed the connection")
        head += piece
    head, rest = head.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")))
    body = bytearray(length)
    view = memoryview(body)
    view[:len(rest)] = rest
    have = len(rest)
    while have < length:
        count = connection.recv_into(view[have:])
        if not count:
            raise RuntimeError("the origin closed the connection")
        have += count
    return body


def floor_ms(data, runs=15):
    """libvips in this process: the same thumbnail (shrink-on-load, width 256, Q 80)."""
    times = []
    for _ in range(runs):
        start = time.monotonic()
        pyvips.Image.thumbnail_buffer(data, WIDTH).jpegsave_buffer(Q=QUALITY, strip=True)
        times.append((time.monotonic() - start) * 1000)
    return statistics.median(times)
