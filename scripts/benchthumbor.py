"""thumbor as the thumbnail bench runs it: from PyPI, its shipped settings but for what
unsafe URLs on a local origin need, with N worker processes, stopped with its workers."""
import os
import shutil
import signal
import subprocess
import time

from benchpeers import children, free_port, wait_port

WIDTH = 256  # the thumbnails' width, thumbd's and thumbor's
QUALITY = 80  # their JPEG quality

THUMBOR_CONF = """
LOADER = 'thumbor.loaders.http_loader'
STORAGE = 'thumbor.storages.file_storage'
FILE_STORAGE_ROOT_PATH = '{work}/thumbor-storage'
RESULT_STORAGE = 'thumbor.result_storages.file_storage'
RESULT_STORAGE_FILE_STORAGE_ROOT_PATH = '{work}/thumbor-results'
# Without this, result storage is skipped for /unsafe/ URLs and every hit resizes again.
RESULT_STORAGE_STORES_UNSAFE = True
ALLOW_UNSAFE_URL = True
QUALITY = {quality}
"""


class Thumbor:
    def __init__(self, origin, work, processes):
        self.name = "thumbor x%d" % processes
        self.port = free_port()
        self.origin = origin
        conf = os.path.join(work, "thumbor-%d.conf" % processes)
        with open(conf, "w") as f:
            f.write(THUMBOR_CONF.format(work=os.path.join(work, "p%d" % processes), quality=QUALITY))
        self.proc = subprocess.Popen(
            [shutil.which("thumbor"), "--port", str(self.port), "--conf", conf, "--processes", str(processes),
             "--log-level", "error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, timeout=60)

    def path(self, name, tag, width=WIDTH, filters=""):
        return "/unsafe/%dx0/%s127.0.0.1:%d/file/%s/%s" % (width, "filters:%s/" % filters if filters else "",
                                                           self.origin.port, name, tag)

    @property
    def pids(self):
        # thumbor --processes N forks N children: they do the work.
        return [self.proc.pid] + children(self.proc.pid)

    def stop(self):
        # Its forked workers first: terminating the parent alone left them running (and
        # spinning at a few % of a core each) after the bench.
        workers = children(self.proc.pid)
        for pid in workers:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.proc.terminate()
        self.proc.wait(timeout=30)
        for pid in workers:
            for _ in range(100):
                if not os.path.exists("/proc/%d" % pid):
                    break
                time.sleep(0.05)
