#!/usr/bin/env python3
"""Hostile requests against a running thumbd: at least 500 distinct cases of broken
HTTP, huge headers and URLs, bad percent-encoding, NUL bytes, invalid and deeply nested JSON,
huge and wrongly typed batches, wrong methods and request-smuggling shapes. Every case must
be answered with a 4xx or a close within 2 s (or 505 for HTTP/2.0 and 9.9 request lines):
never another 5xx, a hang or a crash; and the daemon
must be healthy afterwards. Every target is one that is a 4xx even when parsed leniently.

    hostile_requests.py PORT      prints one line per failure and a summary; exit 1 on any
"""
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

PORT = int(sys.argv[1])
H = b"Host: 127.0.0.1\r\n"
BAD = b"/thumb?url=%zz"  # 400 however it is parsed


def cases():  # noqa: C901 (a list, not logic)
    out = []
    add = lambda name, raw: out.append((name, raw))
    # Request lines.
    for method in [b"GET", b"get", b"G\x00ET", b"GE T", b"", b"\x16\x03\x01", b"PRI", b"CONNECT", b"TRACE", b"PUT",
                   b"PATCH", b"X" * 100, b"GET\t", b"\xff\xfe"]:
        for version in [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.2", b"HTTP/9.9", b"HTTP/1", b"http/1.1", b"HTTP/1.1 x", b""]:
            add("line %r %r" % (method, version), method + b" " + BAD + b" " + version + b"\r\n" + H + b"\r\n")
    for target in [b"", b"*", b"thumb", b"//thumb", b"/thumb?url=%", b"/thumb?url=%0", b"/thumb?url=%g0",
                   b"/thumb?url=%00", b"/thumb?url=http://a%00b/", b"/thumb?url=\x00", b"/thumb?\x00=1",
                   b"/thumb?url=http%3A%2F%2F%E0%A4%A", b"/thumb?url=" + b"%41" * 3000, b"/" + b"a" * 9000,
                   b"/thumb?url=" + b"x" * 5000, b"/thumb?url=http://" + b"a" * 300 + b"/x.jpg&w=0",
                   b"/thumb?url=javascript:alert(1)", b"/thumb?url=file:///etc/passwd", b"/thumb?url=gopher://x/",
                   b"/thumb?url=http://[::1/", b"/thumb?url=http://a:b@c/", b"/thumb?url=http://x:99999/",
                   b"/thumb?url=http:///x", b"/thumb?url=//x/y.jpg", b"/thumb?url=http://x/&priority=max",
                   b"/thumb?url=http://x/&fallback=maybe", b"/thumb?url=http://x/&w=-1", b"/thumb?url=http://x/&q=1000",
                   b"/thumb?url=http://x/&fallback=placeholder&w=9223372036854775807",
                   b"/thumb?url=http://x/&fallback=placeholder&h=4611686018427387904&dpr=2",
                   b"/batches/../../etc/passwd", b"/batches/%2e%2e/x", b"/batches/" + b"f" * 2000, b"/batches/x/events/y",
                   b"/%00", b"/..", b"/nowhere", b"/healthz/../stats/x", b"/thumb#frag?url=x"]:
        for version in [b"HTTP/1.1", b"HTTP/1.0"]:
            add("target %r %r" % (target[:40], version), b"GET " + target + b" " + version + b"\r\n" + H + b"\r\n")
    # Line endings and whitespace.
    for sep in [b"\n", b"\r", b"\r\r\n", b"\n\r"]:
        add("separator %r" % sep, b"GET " + BAD + b" HTTP/1.1" + sep + b"Host: 127.0.0.1" + sep + sep)
    for line in [b" Host: 127.0.0.1", b"Host : 127.0.0.1", b"Host:\t127.0.0.1", b"Host:", b"Ho\x00st: x",
                 b"X-Fold: a\r\n b", b": empty-name", b"NoColon", b"X-Bin: \x00\x01\x02", b"X-Utf8: \xc3\x28",
                 b"Host: a b", b"Host: 127.0.0.1\r\nHost: attacker.example", b"Host: attacker.example", b"Host: [::1",
                 b"Host: 127.0.0.1:99999:1", b"Host: " + b"h" * 5000]:
        add("header %r" % line[:40], b"GET " + BAD + b" HTTP/1.1\r\n" + line + b"\r\n\r\n")
    # Huge headers.
    for n, size in [(200, 100), (1000, 10), (50, 1000), (2, 9000), (10000, 1)]:
        add("%d headers of %d bytes" % (n, size),
            b"GET " + BAD + b" HTTP/1.1\r\n" + H + b"".join(b"X-%d: %s\r\n" % (i, b"v" * size) for i in range(n)) + b"\r\n")
    for n in [65, 100, 150, 500, 2000]:
        add("%d query parameters" % n, b"GET /thumb?" + b"&".join(b"k%d=v" % i for i in range(n)) + b" HTTP/1.1\r\n" + H + b"\r\n")
    # Smuggling shapes and framing.
    post = b"POST /batches HTTP/1.1\r\n" + H + b"Content-Type: application/json\r\n"
    for framing in [b"Transfer-Encoding: gzip", b"Transfer-Encoding: identity", b"Transfer-Encoding: bogus",
                    b"Transfer-Encoding: chunked, identity", b"Transfer-Encoding: identity, chunked",
                    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", b"Transfer-Encoding: xchunked",
                    b"Transfer-Encoding: chunked\r\nContent-Length: 4", b"Content-Length: 4\r\nTransfer-Encoding: chunked",
                    b"Transfer-Encoding:\tchunked\r\nContent-Length: 3", b"Content-Length: 4\r\nContent-Length: 5",
                    b"Content-Length: 4, 5", b"Content-Length: -1", b"Content-Length: +4", b"Content-Length: 0x10",
                    b"Content-Length: 4 4", b"Content-Length: 99999999999999999999", b"Content-Length: 9223372036854775808",
                    b"Content-Length: 18446744073709551616", b"Content-Length: 2000000", b"Content-Length: 1e3",
                    b"Content-Length:", b"Content-Length: \x00"]:
        for body in [b"", b"{}", b"0\r\n\r\n", b"4\r\n{\"a\"\r\n0\r\n\r\n"]:
            add("framing %r body %r" % (framing[:40], body[:10]), post + framing + b"\r\n\r\n" + body)
    for chunked in [b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}\r\n", b"ffffffffffffffffff\r\n{}", b"-1\r\n{}\r\n0\r\n\r\n",
                    b"2;ext=" + b"e" * 5000 + b"\r\n{}\r\n0\r\n\r\n", b"2\r\n{}0\r\n\r\n", b"0\r\nTrailer: " + b"t" * 9000 + b"\r\n\r\n",
                    b"200000\r\n" + b"[" * 100, b"2\n{}\n0\n\n"]:
        add("chunked %r" % chunked[:30], post + b"Transfer-Encoding: chunked\r\n\r\n" + chunked)
    # JSON bodies.
    def batch(body, ctype=b"application/json"):
        return (b"POST /batches HTTP/1.1\r\n" + H + b"Content-Type: " + ctype + b"\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    for body in [b"", b"{", b"}", b"null", b"true", b"1", b"\"x\"", b"[]", b"{}", b"{\"items\":null}", b"{\"items\":{}}",
                 b"{\"items\":\"x\"}", b"{\"items\":[]}", b"{\"urls\":[]}", b"{\"urls\":\"x\"}", b"{\"urls\":[1,2]}",
                 b"{\"items\":[1]}", b"{\"items\":[null]}", b"{\"items\":[[]]}", b"{\"items\":[{\"url\":5}]}",
                 b"{\"items\":[{\"url\":null}]}", b"{\"items\":[{\"id\":{}}]}", b"{\"items\":[{\"url\":\"x\"}],\"priority\":5}",
                 b"{\"items\":[{\"url\":\"x\"}],\"priority\":\"max\"}", b"{\"items\":[{\"url\":\"x\"}],\"w\":\"big\"}",
                 b"{\"items\":[{\"url\":\"x\"}],\"w\":64}", b"{\"urls\":[\"x\"],\"preview\":\"yes\"}",
                 b"\xef\xbb\xbf{\"urls\":[1]}", b"{\"urls\":[\"\\ud800\"],\"x\":\"\\u0000\"}", b"{\"urls\":[1e999]}",
                 b"{\"a\":" * 1000 + b"1" + b"}" * 1000, b"[" * 100000 + b"]" * 100000, b"{\"urls\":[" + b"[" * 50000 + b"]",
                 b"{\"urls\":[" + b",".join([b"\"ftp://x/%d\"" % i for i in range(1001)]) + b"]}",
                 b"{\"urls\":[" + b",".join([b"1"] * 5000) + b"]}", b"{\"urls\":[\"" + b"h" * 900000 + b"\"]}",
                 b"\x00" * 100, b"{\"urls\":[\"x\"]}garbage", b"{'urls':['x']}", b"{\"urls\":[\"x\",]}",
                 b"{\"urls\":[\"x\"], \"urls\":5}", b"{\"items\":[{\"url\":\"" + b"%zz" * 2000 + b"\"}]}"]:
        add("json %r" % body[:30], batch(body))
        add("json %r as text/plain" % body[:30], batch(body, b"text/plain"))
    # Percent-encoding and NULs in the url value, one by one. The host is a loopback literal,
    # which thumbd's default policy refuses (403) before any resolution or connection: a name
    # would be looked up in DNS (off this machine), and its answer race the client's close.
    for value in [b"%", b"%%", b"%2", b"%2G", b"%G2", b"%u0041", b"%C0%AF", b"%FF", b"%E2%82", b"%00%00", b"http%3A%2F%2Fx%00.jpg",
                  b"http://127.0.0.1/%", b"http://127.0.0.1/%zz", b"http://127.0.0.1/\x00",
                  b"http://127.0.0.1/a%0d%0aSet-Cookie:%20a=b", b"http://127.0.0.1%0d%0a/", b"http://127.0.0.1/%2e%2e/%2e%2e/",
                  b"+++", b"%20http://127.0.0.1/", b"http://127.0.0.1/%20", b"\xff\xfe", b"http://\xc3\x28/"]:
        add("url value %r" % value, b"GET /thumb?url=" + value + b"&w=1 HTTP/1.1\r\n" + H + b"\r\n")
    # Methods on every route.
    for method in [b"PUT", b"PATCH", b"DELETE", b"POST", b"TRACE", b"OPTIONS", b"FOO"]:
        for target in [b"/thumb?url=x", b"/healthz", b"/stats", b"/batches/nope", b"/batches/nope/events", b"/nowhere", b"/"]:
            extra = b"Origin: http://attacker.example\r\n" if method != b"FOO" else b""
            add("method %s %s" % (method, target), method + b" " + target + b" HTTP/1.1\r\n" + H + extra + b"Content-Length: 0\r\n\r\n")
    # Foreign origins and hosts on state-changing routes.
    for origin in [b"http://attacker.example", b"null", b"http://127.0.0.1.attacker.example", b"https://127.0.0.1", b"file://"]:
        for target in [b"DELETE /cache", b"DELETE /batches/x", b"POST /batches"]:
            add("origin %s %s" % (origin, target), target + b" HTTP/1.1\r\n" + H + b"Origin: " + origin +
                b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    return out


def complete(data):
    """A whole response with a Content-Length is in (the connection may stay open)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(body) >= int(value.strip())
    return False


def run(case):
    name, raw = case
    started = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", PORT), timeout=2)
    except OSError as e:
        return name, "connect failed: %s" % e
    s.settimeout(2)
    data = b""
    try:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            s.shutdown(socket.SHUT_WR)  # nothing more is coming: a complete answer or a close is due now
        except OSError:
            pass
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if complete(data):
                break
    except socket.timeout:
        if not data:
            return name, "no answer and no close within 2 s"
    except ConnectionResetError:
        pass
    finally:
        s.close()
    if time.monotonic() - started > 2.0:
        return name, "took %.1f s" % (time.monotonic() - started)
    if not data:
        return name, None  # closed without an answer: allowed
    line = data.split(b"\r\n", 1)[0].split(b" ")
    if len(line) < 2 or not line[1].isdigit():
        return name, "unreadable answer %r" % data[:60]
    status = int(line[1])
    # A batch whose JSON is well-formed is accepted even with bad items: each becomes that
    # item's failed event (the contract's "one bad item does not spoil the batch").
    if status == 201 and " json " in " " + name + " " and "text/plain" not in name:
        return name, None
    # 505 is the standard answer to HTTP/2.0 or 9.9 on an HTTP/1 port (RFC 9110 15.6.6),
    # sent by libmicrohttpd before thumbd sees the request: the client's version, not a failure.
    if status == 505 and (b"HTTP/2.0" in name.encode() or b"HTTP/9.9" in name.encode()):
        return name, None
    if not 400 <= status < 500:
        return name, "answered %d" % status
    return name, None


def main():
    all_cases = cases()
    raws = [r for _, r in all_cases]
    assert len(set(raws)) == len(raws), "two cases send the same bytes"
    all_cases = [("#%d %s" % (i, n), r) for i, (n, r) in enumerate(all_cases)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, all_cases))
    failures = [(n, why) for n, why in results if why]
    for name, why in failures:
        print("   FAIL %s: %s" % (name, why))
    s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    healthy = s.recv(4096).startswith(b"HTTP/1.1 200")
    print("   %d hostile cases, %d failures; healthy afterwards: %s" % (len(all_cases), len(failures), healthy))
    sys.exit(0 if not failures and healthy and len(all_cases) >= 500 else 1)


if __name__ == "__main__":
    main()
