#!/usr/bin/env python3
"""Runs the README's shell examples against a running thumbd and a local origin.

Every ```sh block after the quick start is read; each command (continuations joined,
trailing comments dropped) is rewritten to talk to the daemon under test
(http://127.0.0.1:8080 -> $THUMBD) and to the local origin (https://example.org/x.jpg, the
first example's NASA photo and the elided `url=…` -> $ORIGIN/img/...; `thumbd backup` of the
daemon's file WORKDIR/cache.sqlite into WORKDIR/backups, `thumbd compact` of that copy), then
run with bash. A curl must answer below 400
(--fail), a thumbd subcommand must exit 0, and the signing example's two ways of signing
must agree. Install steps (anything else) are not run.

The ```html blocks that use <thumbd-img> are served as a page of another origin and loaded in
headless Chromium (scripts/pagelib.py) against a daemon of their own that allows that
origin: every element must end loaded, but the one whose src names a missing image, which
must fail with upstream_not_found. The ```swift block must be, line for line, the one
Tests/ThumbdIntegrationTests/ReadmeSwiftExampleTests.swift compiles and runs. The ```jsx
block needs React and a bundler, which this machine does not have: it is not run.

Usage: readme_examples.py README THUMBD ORIGIN THUMBD_BINARY WORKDIR
"""
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pagelib import Daemon, Scenarios, check, free_port, serve_page, wait  # noqa: E402

readme, daemon, origin, binary, work = sys.argv[1:6]
text = open(readme).read()
blocks = re.findall(r"```sh\n(.*?)```", text, re.S)[1:]  # the first is the quick start
key = "readme-example-key-0123"
env = dict(os.environ, THUMBD_URL=daemon, KEY=key, THUMBD_SIGNING_KEY=key)
open(os.path.join(work, "urls.txt"), "w").write(f"{origin}/img/w1.jpg\n{origin}/img/w2.jpg\n")
backups = os.path.join(work, "backups")  # the daemon's cache file is WORKDIR/cache.sqlite (test_14)
os.makedirs(backups, exist_ok=True)


def commands(block):
    joined = block.replace("\\\n", " ")
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("<"):
            continue
        # A trailing comment: two spaces and a hash, outside quotes.
        for match in re.finditer(r"\s{2,}#", line):
            head = line[: match.start()]
            if head.count("'") % 2 == 0 and head.count('"') % 2 == 0:
                line = head
                break
        yield line.strip()


def rewrite(command, batch_id):
    encoded = lambda name: urllib.parse.quote(f"{origin}/img/{name}", safe="")
    command = command.replace("http://127.0.0.1:8080", daemon)
    command = re.sub(r"url=https%3A%2F%2Fexample\.org%2F([\w.]+)", lambda m: "url=" + encoded(m.group(1)), command)
    # The first example's real photo (public domain, on NASA's image library) comes from the local origin here.
    command = command.replace("url=https%3A%2F%2Fimages-assets.nasa.gov%2Fimage%2Fas17-148-22727%2Fas17-148-22727~medium.jpg",
                              "url=" + encoded("earth.jpg"))
    command = command.replace("url=…", "url=" + encoded("readme.jpg"))
    command = command.replace("https://example.org/missing.jpg", f"{origin}/status/404")
    command = re.sub(r"https://example\.org/([\w.]+)", lambda m: f"{origin}/img/{m.group(1)}", command)
    if batch_id:
        command = command.replace("<id>", batch_id)
    # The cache file's commands: a backup of the daemon's file into the work directory, and
    # compact on that copy (compact is refused while a daemon holds its file).
    command = command.replace("/backups/", backups + "/")
    if command.startswith("thumbd backup "):
        command += " --db " + shlex.quote(os.path.join(work, "cache.sqlite"))
    elif command.startswith("thumbd compact"):
        command += " --db " + shlex.quote(os.path.join(backups, "thumbd.sqlite"))
    if command.startswith("thumbd "):
        command = shlex.quote(binary) + command[len("thumbd"):]
    elif command.startswith("curl "):
        command = "curl --fail --silent --show-error --max-time 20 " + command[len("curl "):]
    return command


# What talks to the daemon is run; install steps (swift build, install, systemctl,
# journalctl) change the machine and are not.
RUN = ("curl ", "thumbd ", "python3 ")
batch_id = None
ran = 0
skipped = 0
signed = {}
for block in blocks:
    for original in commands(block):
        if not original.startswith(RUN):
            skipped += 1
            continue
        if "/batches/<id>/items" in original:
            # Items join a batch that still runs: one held at the origin until they are added.
            held = json.loads(subprocess.run(
                ["curl", "-s", "-X", "POST", daemon + "/batches", "-H", "Content-Type: application/json",
                 "-d", json.dumps({"urls": [f"{origin}/gate/readme-items"]})], capture_output=True, text=True).stdout)["id"]
            command = rewrite(original, held)
        else:
            command = rewrite(original, batch_id)
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, errors="replace", timeout=60)
        if done.returncode != 0:
            sys.exit(f"README example failed ({done.returncode}): {original}\n  ran: {command}\n  {done.stderr.strip()}")
        ran += 1
        if "/batches/<id>/items" in original:
            urllib.request.urlopen(f"{origin}/__release/readme-items").read()
        if "/batches" in original and "-X POST" in original and "focus" not in original:
            batch_id = json.loads(done.stdout)["id"]
        if " sign " in f" {original} " and "--sign-key" in original:
            signed["thumbd sign"] = done.stdout.strip().rsplit("sig=", 1)[-1]
        if original.startswith("python3 -c 'import hmac"):
            signed["python"] = done.stdout.strip()
if len(signed) != 2 or signed["thumbd sign"] != signed["python"]:
    sys.exit(f"the two signing examples disagree: {signed}")
print(f"   ran {ran} README examples; {skipped} install steps left alone")


def element_page(browser, html, port, page_port):
    """a README <thumbd-img> page, served from another origin: its tiles load, the missing one fails"""
    page = html.replace("http://127.0.0.1:8080", "http://127.0.0.1:%d" % port)
    page = page.replace("https://example.org/missing.jpg", f"{origin}/status/404")
    page = re.sub(r"https://example\.org/([\w.]+)", lambda m: f"{origin}/img/readme-element-{m.group(1)}", page)
    server, _ = serve_page(page, page_port)
    try:
        browser.call("Page.navigate", url="http://127.0.0.1:%d/" % page_port)
        states = "[...document.querySelectorAll('thumbd-img')].map((e) => e.hasAttribute('loaded') ? 'loaded' : e.getAttribute('state'))"
        expected = ["failed" if "missing.jpg" in tag else "loaded" for tag in re.findall(r"<thumbd-img[^>]*>", html)]
        # Every element of the page (not the blank page before it) has settled.
        wait(browser, "(() => { const s = %s; return s.length === %d && s.every((x) => x === 'loaded' || x === 'failed'); })()"
             % (states, len(expected)), seconds=60, say=states)
        got = browser.evaluate(states)
        check(got == expected, "states %s, expected %s" % (got, expected))
        failures = browser.evaluate("[...document.querySelectorAll('thumbd-img[state=failed]')].map((e) => e.failure.error)")
        check(all(f == "upstream_not_found" for f in failures), "failures: %s" % failures)
    finally:
        server.shutdown()


# The ```swift block is compiled and run by the Swift tests (ReadmeSwiftExampleTests), its
# server and URLs named by variables there: here, the two texts must agree.
swift_blocks = re.findall(r"```swift\n(.*?)```", text, re.S)
test_file = os.path.join(os.path.dirname(readme), "Tests/ThumbdIntegrationTests/ReadmeSwiftExampleTests.swift")
tested = open(test_file).read()
tested = tested[tested.index("// README-BEGIN\n") + len("// README-BEGIN\n"):tested.index("// README-END")]
tested_lines = [line.strip() for line in tested.splitlines() if line.strip()]
for block in swift_blocks:
    lines = [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("import ")]
    lines = [line.replace('"http://127.0.0.1:8080"', "server").replace('["https://example.org/a.jpg", "https://example.org/b.png"]', "[a, b]")
             .replace('"https://example.org/a.jpg"', "a") for line in lines]
    if lines != tested_lines:
        sys.exit("the README's Swift example is not the one ReadmeSwiftExampleTests runs:\n  README: %s\n  test:   %s" % (lines, tested_lines))
print(f"   the README's {len(swift_blocks)} Swift example(s) are the ones the Swift tests run")

pages = [block for block in re.findall(r"```html\n(.*?)```", text, re.S) if "<thumbd-img" in block]
if pages:
    page_port = free_port()
    element_daemon = Daemon(binary, work, "readme-elements", env={"THUMBD_SERVER_ALLOWED_ORIGINS": "http://127.0.0.1:%d" % page_port})
    scenarios = Scenarios(work)
    try:
        for html in pages:
            scenarios.run(lambda browser, html=html: element_page(browser, html, element_daemon.port, page_port),
                          element_page.__doc__)
    finally:
        element_daemon.stop()
    scenarios.finish()
    print(f"   ran {len(pages)} README <thumbd-img> page(s) in Chromium")
