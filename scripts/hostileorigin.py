"""The test origin's hostile answers (`/hostile/KIND`): heads that lie about lengths or carry
junk, bodies cut short or never ending, a gzip bomb. Each is written by hand onto the
connection, since a well-behaved HTTP server cannot send them."""
import socket
import struct
import threading
import time
import zlib

import realimage


def hostile(handler, kind, q):
    """Responses written byte by byte, as a broken or malicious origin would."""
    out = handler.wfile
    body = realimage.jpeg("/hostile/" + kind, int(q.get("size", "4096")))

    def head(*lines):
        out.write(("\r\n".join(("HTTP/1.1 200 OK", "Content-Type: image/jpeg") + lines) + "\r\n\r\n").encode())

    handler.close_connection = True
    if kind == "long-header":  # one oversized (or invalid) header on an otherwise good image
        value = q.get("value") or ("x" * int(q.get("bytes", "8000")))
        head("Content-Length: %d" % len(body), "%s: %s" % (q.get("name", "Last-Modified"), value))
        out.write(body)
    elif kind == "many-headers":  # far more header bytes than anybody needs
        head("Content-Length: %d" % len(body), *("X-Junk-%d: %s" % (i, "y" * 1000) for i in range(int(q.get("n", "300")))))
        out.write(body)
    elif kind == "double-length":  # two Content-Length values that disagree
        head("Content-Length: %d" % len(body), "Content-Length: %d" % (len(body) // 2))
        out.write(body)
    elif kind == "list-length":
        head("Content-Length: %d, %d" % (len(body), len(body) // 2))
        out.write(body)
    elif kind == "same-length":  # repeated but equal: allowed (RFC 9112 6.3)
        head("Content-Length: %d" % len(body), "Content-Length: %d" % len(body))
        out.write(body)
    elif kind == "short-length":  # says less than it sends: only the declared bytes count
        head("Content-Length: %d" % (len(body) // 2))
        out.write(body)
    elif kind == "bad-chunked":
        head("Transfer-Encoding: chunked")
        out.write(b"%x\r\n%s\r\nzz\r\nnot hex\r\n" % (len(body), body))
    elif kind == "trailer":  # a chunked image whose trailer tries to change its freshness
        head("Transfer-Encoding: chunked", "Trailer: Cache-Control")
        out.write(b"%x\r\n%s\r\n0\r\nCache-Control: no-store\r\n\r\n" % (len(body), body))
    elif kind == "reset":  # a few bytes, then a TCP reset
        head("Content-Length: %d" % len(body))
        out.write(body[:100])
        out.flush()
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
        return
    elif kind == "empty":  # closes without a byte
        pass
    elif kind == "garbage":  # not HTTP at all
        out.write(b"\x00\x01 hello there\r\n\r\n")
    elif kind == "bad-status":
        out.write(b"HTTP/1.1 2000 Whatever\r\nContent-Length: 0\r\n\r\n")
    elif kind == "endless":  # a chunked body that never ends (bounded: 64 MB)
        head("Transfer-Encoding: chunked")
        try:
            for _ in range(4096):
                out.write(b"4000\r\n" + b"\xff" * 0x4000 + b"\r\n")
        except OSError:
            return
    elif kind == "drip":  # one byte a second (bounded: 60 s)
        head("Content-Length: %d" % len(body))
        try:
            for i in range(60):
                out.write(body[i:i + 1])
                out.flush()
                time.sleep(1)
        except OSError:
            return
    elif kind == "gzip-bomb":  # 64 MB of zeros in ~64 KB, claimed as gzip
        bomb = gzip_bomb()
        head("Content-Encoding: gzip", "Content-Length: %d" % len(bomb))
        out.write(bomb)
    elif kind == "redirect-loop":
        out.write(b"HTTP/1.1 302 Found\r\nLocation: /hostile/redirect-loop\r\nContent-Length: 0\r\n\r\n")
    elif kind == "redirect-to":  # to any URL the test names
        out.write(("HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % q["url"]).encode())
    else:
        out.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    try:
        out.flush()
    except OSError:
        pass


BOMB = []  # made once, on first ask
BOMB_LOCK = threading.Lock()


def gzip_bomb():
    """64 MB of zeros as one gzip stream, made in milliseconds: one megabyte deflated on its
    own (a full flush leaves nothing for the next block to refer to), repeated 64 times. Level
    9 over the whole 64 MB took 0.4 s of CPU before the first byte, longer than the tests'
    low-speed limit on a loaded machine."""
    with BOMB_LOCK:
        if not BOMB:
            zeros = bytes(1 << 20)
            compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
            block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
            crc = 0
            for _ in range(64):
                crc = zlib.crc32(zeros, crc)
            header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
            BOMB.append(header + block * 64 + compressor.flush() + struct.pack("<II", crc, (64 << 20) & 0xFFFFFFFF))
        return BOMB[0]
