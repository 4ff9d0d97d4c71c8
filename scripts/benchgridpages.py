"""The pages the grid bench loads beside thumbd's own: the same layout with its tiles as
<img> elements (straight at the originals, through /thumb, or static files nginx serves) or
as <thumbd-img> elements; and the nginx that serves the static tiles, the browser's floor."""
import os
import shutil
import subprocess

from benchpeers import free_port, wait_port

TILE = 160


def static_page(template, sources, style):
    """thumbd's page with its grid filled with <img> tiles and its script removed: the same
    layout (the tiles' style, which /thumbd.js adds to the page, written in), loaded by the
    browser alone."""
    template = template.replace("</style>", style + "\n</style>", 1)
    head, rest = template.split('<div id="grid">', 1)
    tiles = "".join('<div class="tile" data-index="%d"><div class="frame"><img src="%s" alt="" style="width:100%%;height:100%%;object-fit:cover"></div>'
                    '<div class="caption">%s</div></div>' % (i, src, "photo %d" % i) for i, src in enumerate(sources))
    after = rest.split("</div>", 1)[1]
    after = after[:after.index("<script")] + after[after.index("</script>") + len("</script>"):]
    return head + '<div id="grid" class="thumbd-grid">' + tiles + "</div>" + after


def element_page(template, sources, style, server):
    """The same layout, its tiles <thumbd-img> elements of /thumbd.js from `server`."""
    page = static_page(template, sources, style)
    page = page.replace('<img src="', '<thumbd-img src="').replace(
        'alt="" style="width:100%;height:100%;object-fit:cover">',
        'width="%d" height="%d" alt="" style="width:100%%;height:100%%;display:block"></thumbd-img>' % (TILE, TILE))
    return page.replace("</body>", '<script type="module" src="%s/thumbd.js"></script>\n</body>' % server)


NGINX_CONF = """
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    types {{ image/jpeg jpg; }}
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


class StaticTiles:
    """nginx serving the 120 tiles as static files: the fastest an HTTP/1.1 server can
    answer them, so a page of <img> at them is the browser's own floor for the warm grid."""

    def __init__(self, work, photos_dir, names):
        import pyvips
        self.root = os.path.join(work, "tiles")
        os.makedirs(self.root, exist_ok=True)
        os.chmod(work, 0o755)  # nginx's workers (another user when it runs as root) read the tiles
        for index, name in enumerate(names):
            tile = pyvips.Image.thumbnail(os.path.join(photos_dir, name), TILE, height=TILE, crop="centre")
            tile.jpegsave(os.path.join(self.root, "tile-%03d.jpg" % index), Q=80, strip=True)
        self.port = free_port()
        conf = os.path.join(work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(work=work, port=self.port, root=self.root))
        self.proc = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", conf, "-p", work,
                                      "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def url(self, index):
        return "http://127.0.0.1:%d/tile-%03d.jpg" % (self.port, index)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def nginx_version():
    result = subprocess.run([shutil.which("nginx") or "/usr/sbin/nginx", "-v"], capture_output=True, text=True)
    return result.stderr.strip().split("/")[-1]
