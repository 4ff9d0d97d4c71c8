#!/usr/bin/env python3
"""What each output format costs for grid tiles, with thumbd's own encoder settings
(JPEG Q 80, WebP Q 80, AVIF Q 55 at effort 2, metadata stripped), in libvips in-process:
the encode's CPU time and its bytes, for square `cover` tiles of 64 to 512 px made from a
4000x3000 and a 1200x800 photo. The encode is timed alone (the tile's pixels are made
once, in memory), single-threaded (one core, as in a loaded daemon), median of `--rounds`.

And what the bytes saved are worth on loopback, where thumbd answers: the time to move
them through a local socket, measured here too.
"""
import argparse
import os
import socket
import statistics
import sys
import threading
import time

import pyvips

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchthumbs import photo  # noqa: E402

SIZES = (64, 128, 160, 256, 512)
FORMATS = (
    ("jpeg", lambda image: image.jpegsave_buffer(Q=80, strip=True)),
    ("webp", lambda image: image.webpsave_buffer(Q=80, strip=True)),
    ("avif", lambda image: image.heifsave_buffer(Q=55, strip=True, compression="av1", effort=2)),
)


def cpu_ms(function, rounds):
    times = []
    for _ in range(rounds):
        started = time.process_time()
        function()
        times.append((time.process_time() - started) * 1000)
    return statistics.median(times)


def loopback_mb_per_ms():
    """Bytes a local TCP socket moves per millisecond (one connection, 64 MB)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    payload = b"x" * (1 << 20)

    def send():
        connection, _ = server.accept()
        for _ in range(64):
            connection.sendall(payload)
        connection.close()

    thread = threading.Thread(target=send)
    thread.start()
    client = socket.create_connection(server.getsockname())
    started = time.perf_counter()
    received = 0
    while True:
        chunk = client.recv(1 << 20)
        if not chunk:
            break
        received += len(chunk)
    elapsed_ms = (time.perf_counter() - started) * 1000
    thread.join()
    client.close()
    server.close()
    return received / elapsed_ms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pyvips.concurrency_set(1)
    rate = loopback_mb_per_ms()
    sources = {"4000x3000": photo(4000, 3000), "1200x800": photo(1200, 800)}
    print("### What a format costs for grid tiles (libvips in-process, one thread, median of %d)" % args.rounds)
    print()
    print("| source | tile px | JPEG ms | JPEG bytes | WebP ms | WebP bytes | AVIF ms | AVIF bytes | AVIF ms / JPEG ms | "
          "AVIF bytes saved vs WebP | their loopback time ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, source in sources.items():
        for size in SIZES:
            tile = pyvips.Image.thumbnail_buffer(source, size, height=size, crop="centre").copy_memory()
            row = {}
            for name, save in FORMATS:
                row[name] = (cpu_ms(lambda: save(tile), args.rounds), len(save(tile)))
            saved = row["webp"][1] - row["avif"][1]
            print("| %s | %d | %.2f | %d | %.2f | %d | %.2f | %d | %.1f | %d | %.4f |" % (
                label, size, row["jpeg"][0], row["jpeg"][1], row["webp"][0], row["webp"][1], row["avif"][0],
                row["avif"][1], row["avif"][0] / max(row["jpeg"][0], 0.01), saved, saved / rate))
    print()
    print("loopback moves %.0f MB/s here (one connection)" % (rate * 1000 / 1e6))


if __name__ == "__main__":
    main()
