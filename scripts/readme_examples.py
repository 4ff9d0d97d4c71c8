#!/usr/bin/env python3
"""Runs the README's shell examples against a running thumbd and a local origin.

Every ```sh block after the quick start is read; each command (continuations joined,
trailing comments dropped) is rewritten to talk to the daemon under test
(http://127.0.0.1:8080 -> $THUMBD) and to the local origin (https://example.org/x.jpg and
the elided `url=…` -> $ORIGIN/img/...), then run with bash. A curl must answer below 400
(--fail), a thumbd subcommand must exit 0, and the signing example's two ways of signing
must agree. Install steps (anything else) are not run. Usage: readme_examples.py README THUMBD ORIGIN THUMBD_BINARY WORKDIR
"""
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.parse

readme, daemon, origin, binary, work = sys.argv[1:6]
text = open(readme).read()
blocks = re.findall(r"```sh\n(.*?)```", text, re.S)[1:]  # the first is the quick start
key = "readme-example-key-0123"
env = dict(os.environ, THUMBD_URL=daemon, KEY=key, THUMBD_SIGNING_KEY=key)
open(os.path.join(work, "urls.txt"), "w").write(f"{origin}/img/w1.jpg\n{origin}/img/w2.jpg\n")


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
    command = command.replace("url=…", "url=" + encoded("readme.jpg"))
    command = re.sub(r"https://example\.org/([\w.]+)", lambda m: f"{origin}/img/{m.group(1)}", command)
    if batch_id:
        command = command.replace("<id>", batch_id)
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
        command = rewrite(original, batch_id)
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, errors="replace", timeout=60)
        if done.returncode != 0:
            sys.exit(f"README example failed ({done.returncode}): {original}\n  ran: {command}\n  {done.stderr.strip()}")
        ran += 1
        if "/batches" in original and "-X POST" in original and "focus" not in original:
            batch_id = json.loads(done.stdout)["id"]
        if " sign " in f" {original} " and "--sign-key" in original:
            signed["thumbd sign"] = done.stdout.strip().rsplit("sig=", 1)[-1]
        if original.startswith("python3 -c 'import hmac"):
            signed["python"] = done.stdout.strip()
if len(signed) != 2 or signed["thumbd sign"] != signed["python"]:
    sys.exit(f"the two signing examples disagree: {signed}")
print(f"   ran {ran} README examples; {skipped} install steps left alone")
