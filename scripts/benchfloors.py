"""The floors of scripts/bench thumbs: libvips in this process (pyvips, the same library
thumbd links) making the same thumbnail, bare, with thumbd's own steps, and with what a cache
does beside them; CPU and wall milliseconds per thumbnail."""
import os
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
    thumbd adds (fetch, checks, hashes, SQLite, HTTP)."""
    width = pyvips.Image.new_from_buffer(data, "").width
    shrink = next((s for s in (8, 4, 2) if width / WIDTH >= s), 1)
    start = time.process_time()
    for _ in range(runs):
        image = pyvips.Image.jpegload_buffer(data, shrink=shrink, access="sequential")
        image.thumbnail_image(WIDTH).jpegsave_buffer(Q=QUALITY, strip=True)
    return (time.process_time() - start) * 1000 / runs


def stored_work_cpu_ms(data, directory, runs=15):
    """`same_work_cpu_ms` and what a cache does beside a bare thumbnailer, in this process:
    the ETags (the thumbnail's SHA-256; the original's, from its origin's ETag, which the
    bench origin sends as nginx would: a SHA-256 of a few dozen bytes) and the inserts of
    both into SQLite (the same
    library and thumbd's settings: 16 KB pages, WAL checkpointed past 4 MB, synchronous
    NORMAL): CPU milliseconds per thumbnail. Not in it: receiving the original, the HTTP
    answer."""
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
    start = time.process_time()
    for i in range(runs):
        hashlib.sha256(b'http://127.0.0.1:8000/file/big.jpg/%d\n"5f0e-%x"\n%d' % (i, len(data), len(data))).digest()
        db.execute("INSERT INTO objects VALUES (?, ?)", ("original-%d" % i, data))
        image = pyvips.Image.jpegload_buffer(data, shrink=shrink, access="sequential")
        made = image.thumbnail_image(WIDTH).jpegsave_buffer(Q=QUALITY, strip=True)
        hashlib.sha256(made).digest()
        db.execute("INSERT INTO objects VALUES (?, ?)", ("variant-%d" % i, made))
    cpu = (time.process_time() - start) * 1000 / runs
    db.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return cpu


def floor_ms(data, runs=15):
    """libvips in this process: the same thumbnail (shrink-on-load, width 256, Q 80)."""
    times = []
    for _ in range(runs):
        start = time.monotonic()
        pyvips.Image.thumbnail_buffer(data, WIDTH).jpegsave_buffer(Q=QUALITY, strip=True)
        times.append((time.monotonic() - start) * 1000)
    return statistics.median(times)
