"""The Dockerfile's two stages, run without a container engine (scripts/containertest.py):
the build stage on this machine, the run stage in a debootstrap Debian 12 root, each
mount in a private mount namespace."""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, ".build-container")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # an image's default


def check(condition, message):
    if not condition:
        raise SystemExit("   " + message)


def dockerfile_stages(path):
    """[(base, name, [(INSTRUCTION, text)])]: continuation lines joined, comments dropped."""
    stages, logical = [], ""
    for line in open(path).read().splitlines():
        if line.lstrip().startswith("#"):  # comments, and the syntax directive
            continue
        logical += line.rstrip()
        if logical.endswith("\\"):
            logical = logical[:-1] + " "
            continue
        if logical.strip():
            instruction, _, text = logical.strip().partition(" ")
            if instruction.upper() == "FROM":
                base, _, name = text.partition(" AS ")
                stages.append((base.strip(), name.strip(), []))
            else:
                stages[-1][2].append((instruction.upper(), text.strip()))
        logical = ""
    return stages


def tail(path, lines=30):
    return "\n".join(open(path, errors="replace").read().splitlines()[-lines:])


def env_pairs(text):
    return dict(pair.split("=", 1) for pair in shlex.split(text))


def build_stage(base, instructions, work):
    """Runs the build stage here (its log in work); answers where its /out is."""
    swift = re.fullmatch(r"swift:(\d+\.\d+)-bookworm", base)
    check(swift, "the build stage's base is %s, not swift:M.m-bookworm" % base)
    here = subprocess.run(["swift", "--version"], capture_output=True, text=True).stdout
    check("Swift version %s" % swift.group(1) in here, "the build stage names Swift %s; this machine has: %s" % (swift.group(1), here.splitlines()[0]))
    check("VERSION_CODENAME=bookworm" in open("/etc/os-release").read(), "this machine is not Debian 12 (bookworm)")
    src, out = os.path.join(CACHE, "src"), os.path.join(CACHE, "out")
    copied = set()
    for instruction, text in instructions:
        if instruction == "COPY":
            source, target = text.split()
            copied.add(os.path.normpath(os.path.join(src, target)))
            sync(os.path.join(ROOT, source), os.path.join(src, target))
        elif instruction == "RUN" and "apt-get install" in text:
            packages = [word for word in text.split("install", 1)[1].split("&&")[0].split() if not word.startswith("-")]
            missing = [p for p in packages if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode]
            check(not missing, "the build stage's packages are not on this machine: %s" % missing)
        elif instruction == "RUN":
            command = text.replace(" /out/", " %s/" % out)
            with open(os.path.join(work, "build.log"), "ab") as log:
                built = subprocess.run(["bash", "-c", command], cwd=src, stdout=log, stderr=subprocess.STDOUT, timeout=1800)
            check(built.returncode == 0, "the build stage failed: %s\n%s" % (text, tail(os.path.join(work, "build.log"))))
    # What an earlier run left and the Dockerfile no longer copies is not in the image's /src.
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if path not in copied and not name.startswith(".build"):
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    return out


def sync(source, target):
    """Copies source to target keeping times (an unchanged file does not rebuild), and
    removes what source no longer has."""
    if os.path.isfile(source):
        if not (os.path.exists(target) and os.path.getmtime(target) == os.path.getmtime(source)):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target)
        return
    os.makedirs(target, exist_ok=True)
    for name in set(os.listdir(target)) - set(os.listdir(source)):
        path = os.path.join(target, name)
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    for name in os.listdir(source):
        sync(os.path.join(source, name), os.path.join(target, name))


def base_root(base, rootfs):
    check(base == "debian:bookworm-slim", "the run stage's base is %s, not debian:bookworm-slim" % base)
    tarball = os.path.join(CACHE, "bookworm-minbase.tar")
    if not os.path.exists(tarball):
        fresh = os.path.join(CACHE, "bookworm-minbase")
        shutil.rmtree(fresh, ignore_errors=True)
        subprocess.run(["debootstrap", "--variant=minbase", "bookworm", fresh, apt_mirror()], check=True,
                       stdout=subprocess.DEVNULL, timeout=900)
        with tarfile.open(tarball + ".part", "w") as tar:
            tar.add(fresh, arcname=".")
        os.rename(tarball + ".part", tarball)
        shutil.rmtree(fresh)
    os.makedirs(rootfs)
    subprocess.run(["tar", "-xpf", tarball, "-C", rootfs], check=True, timeout=300)


def apt_mirror():
    """The Debian mirror this machine's apt uses (deb822 or one-line sources), else Debian's own."""
    for path, pattern in (("/etc/apt/sources.list.d/debian.sources", r"URIs:\s*(\S+/debian)\s"),
                          ("/etc/apt/sources.list", r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)\s+bookworm\s")):
        if os.path.exists(path):
            found = re.search(pattern, open(path).read(), re.MULTILINE)
            if found:
                return found.group(1)
    return "http://deb.debian.org/debian"


def in_root(rootfs, argv, env, user=None, volume=None, workdir="/", **popen):
    """argv in the root, in a private mount namespace. With one process throughout (unshare
    without --fork, then exec), the Popen's pid is the command's."""
    mounts = ["mount -t proc proc %s/proc" % rootfs, "mount --rbind /dev %s/dev" % rootfs]
    if volume:
        mounts.append("mount --bind %s %s%s" % (volume[0], rootfs, volume[1]))
    userspec = ["--userspec=%d:%d" % (user, user)] if user else []
    inner = ["chroot"] + userspec + [rootfs, "/usr/bin/env", "-i"] + ["%s=%s" % kv for kv in env.items()] + \
        ["sh", "-c", 'cd "$0" && exec "$@"', workdir] + argv
    script = " && ".join(mounts) + " && exec " + " ".join(shlex.quote(a) for a in inner)
    return subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], **popen)


def uid_of(rootfs, user):
    return int(subprocess.run(["chroot", rootfs, "id", "-u", user], capture_output=True, text=True, check=True).stdout)


class Image:
    """The run stage, applied to a fresh root."""

    def __init__(self, stage, out, rootfs, work):
        self.work, self.rootfs, self.env, self.user, self.workdir = work, rootfs, {"PATH": PATH, "HOME": "/root"}, "root", "/"
        for instruction, text in stage:
            if instruction == "RUN":
                user = None if self.user == "root" else uid_of(rootfs, self.user)
                done = in_root(rootfs, ["sh", "-c", text], self.env, user, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                _, error = done.communicate(timeout=600)
                check(done.returncode == 0, "RUN failed in the run stage: %s\n%s" % (text, error.decode()[-2000:]))
            elif instruction == "COPY":
                words = text.split()
                source = os.path.join(out, os.path.relpath(words[-2], "/out")) if words[0] == "--from=build" else os.path.join(ROOT, words[-2])
                target = rootfs + words[-1]
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy2(source, target)
            elif instruction == "USER":
                self.user = text
            elif instruction == "WORKDIR":
                self.workdir = text
            elif instruction == "ENV":
                self.env.update(env_pairs(text))
            elif instruction == "VOLUME":
                self.volume = text
            elif instruction == "STOPSIGNAL":
                self.stop_signal = getattr(signal, text)
            elif instruction == "HEALTHCHECK":
                self.health = json.loads(text.split(" CMD ", 1)[1])
            elif instruction == "ENTRYPOINT":
                self.entrypoint = json.loads(text)
        self.uid = uid_of(rootfs, self.user)

    def volume_dir(self, name):
        path = os.path.join(self.work, "volume-" + name)
        os.makedirs(path)
        os.chown(path, self.uid, self.uid)
        return path
