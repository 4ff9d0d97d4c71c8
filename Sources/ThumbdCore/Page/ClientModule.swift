import Support

/// `GET /thumbd.js`: the grid as an ES module any page can import (a page on another origin
/// listed in `server.allowedOrigins`): a batch shown as tiles that fill in from its event
/// stream, focus on scroll, cancel off screen, placeholders, and a restart followed. thumbd's
/// own page (`GET /`) imports it too, so there is one implementation.
enum ClientModule {
    static let body = Bytes(Array((head.replacingOccurrences(of: "const style = STYLE;", with: "const style = " + JSONText.quote(style) + ";")
                                   + tail + batch + element).utf8))

    /// The tiles' look, added to the page once (`options.style: false` leaves it out). Colours
    /// come from the page's `--card`, `--line`, `--accent`, `--muted` and `--bad` when it has them.
    /// A tile waits for its first bytes behind a spinner (eight steps a turn, paused off
    /// screen), then shows its progress as a still fill: every animation is a frame to paint
    /// on each tick, and with software rendering a grid of spinners took the CPU the images needed.
    static let style = #"""
.thumbd-grid { display:grid; grid-template-columns:repeat(auto-fill, minmax(140px, 1fr)); gap:12px; }
@media (max-width: 480px) { .thumbd-grid { grid-template-columns:repeat(2, 1fr); gap:8px; } }
.thumbd-grid .tile { background:var(--card, #fff); border:1px solid var(--line, #e3e6eb); border-radius:10px; overflow:hidden; display:flex; flex-direction:column; }
.thumbd-grid .frame { aspect-ratio:1; display:flex; align-items:center; justify-content:center; background:#f0f2f5; position:relative; }
.thumbd-grid .frame img { width:100%; height:100%; object-fit:cover; display:block; }
.thumbd-grid .frame img.preview { image-rendering:auto; opacity:.85; }
.thumbd-grid .spinner { width:28px; height:28px; border:3px solid #d5d9e0; border-top-color:var(--accent, #2563eb); border-radius:50%; }
.thumbd-grid .tile:not(.offscreen) .spinner { animation:thumbd-spin .8s steps(8) infinite; }
@keyframes thumbd-spin { to { transform:rotate(360deg); } }
.thumbd-grid .wait { width:30px; height:30px; color:#c4c9d2; }
.thumbd-grid .fill { position:absolute; left:0; bottom:0; height:3px; width:0; background:var(--accent, #2563eb); }
.thumbd-grid .pct { position:absolute; bottom:6px; right:8px; font-size:11px; color:var(--muted, #6b7280); }
.thumbd-grid .broken { text-align:center; color:var(--bad, #b42318); font-size:12px; padding:8px; }
.thumbd-grid .broken svg { width:38px; height:38px; display:block; margin:0 auto 4px; }
.thumbd-grid .cancelled .frame { opacity:.5; }
.thumbd-grid .caption { padding:6px 8px; font-size:11px; color:var(--muted, #6b7280); white-space:nowrap; overflow:hidden; text-overflow:ellipsis; border-top:1px solid var(--line, #e3e6eb); }
"""#

    /// The module up to `start` (ClientModule+Start.swift holds the rest).
    private static let head = #"""
// thumbd's grid, for any page: a batch of image URLs shown as tiles that fill in as each
// image arrives (its progress, a blurred preview, a placeholder on failure), the tiles on
// screen first and named again as the user scrolls, tiles off screen cancelled when asked,
// and a restart of the daemon followed. thumbd's own page (GET /) is built on it.
//
//   import { createGrid } from "http://127.0.0.1:8080/thumbd.js";
//   const grid = createGrid({ grid: document.querySelector("#tiles") });
//   grid.start(["https://example.org/a.jpg", "https://example.org/b.png"]);
//
// A page on another origin must be listed in thumbd's server.allowedOrigins.
const style = STYLE;

export function createGrid(options = {}) {
  const grid = options.grid, status = options.status || null, bar = options.bar || null;
  if (!grid) throw new Error("createGrid needs options.grid, the element the tiles go in");
  // The daemon: the one this module came from, unless told otherwise.
  const server = (options.server || new URL(import.meta.url).origin).replace(/\/$/, "");
  const say = (text) => { if (status) status.textContent = text; };
  const preset = options.preset || null;
  if (options.style !== false && !document.getElementById("thumbd-grid-style")) {
    const sheet = document.createElement("style");
    sheet.id = "thumbd-grid-style"; sheet.textContent = style;
    document.head.appendChild(sheet);
  }
  grid.classList.add("thumbd-grid");
  let source = null, batch = null, tiles = [], totals = {}, observer = null;
  // Tiles that left the screen a while ago are cancelled, and taken up again when they come
  // back (a long list that must not load what the user skipped).
  const cancelOffscreen = !!options.cancelOffscreen;
  const brokenIcon = '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="1.6"><rect x="3" y="3" width="18" height="18" rx="3"/><path d="M8 8l8 8M16 8l-8 8"/></svg>';
  const glyph = document.createElement("template");
  glyph.innerHTML = '<svg class="wait" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="1.6"><rect x="3" y="3" width="18" height="18" rx="3"/><circle cx="9" cy="9" r="1.8"/><path d="M21 15l-5-5L5 21"/></svg>';
  const kb = (n) => n >= 1048576 ? (n / 1048576).toFixed(1) + " MB" : Math.round(n / 1024) + " KB";

  // What changes in the tiles is applied together: at the next frame, at most every 50 ms.
  const paint = painter();

  // The status line and the bar are redrawn at most every 100 ms: a grid's events come in
  // bursts, and a redraw per event costs the browser a layout and a paint each.
  let drawing = 0;
  function render() {
    if (!drawing) drawing = setTimeout(draw, 100);
  }

  function draw() {
    clearTimeout(drawing); drawing = 0;
    const finished = totals.done + totals.failed + totals.cancelled;
    if (bar) bar.firstElementChild.style.width = (totals.total ? 100 * finished / totals.total : 0) + "%";
    if (options.onProgress) options.onProgress({ ...totals });
    say(`${totals.done} done, ${totals.failed} failed` +
      (totals.cancelled ? `, ${totals.cancelled} cancelled` : "") + ` of ${totals.total} · ${kb(totals.bytes)}` +
      (totals.ended ? ` · finished in ${totals.ms} ms` : ""));
  }

  function tile(item) {
    const el = document.createElement("div");
    el.className = "tile";
    el.dataset.state = "queued";
    el.innerHTML = '<div class="frame"><div class="spinner"></div><span class="fill"></span><span class="pct"></span></div><div class="caption"></div>';
    el.querySelector(".caption").textContent = fileName(item.url);
    el.title = item.url;
    grid.appendChild(el);
    return el;
  }

  // A caption names the file (decoded), not the URL: a grid of one origin's images would
  // all read "https://…" up to where the caption is cut.
  function fileName(url) {
    try {
      const u = new URL(url), last = u.pathname.split("/").filter(Boolean).pop();
      return last ? decodeURIComponent(last) : u.host;
    } catch (e) { return url; }
  }

  // The side asked of thumbd: the tile's laid-out width × devicePixelRatio. When the tiles
  // grow (a wider window, a rotated phone), loaded tiles are asked again at the new size
  // (a signed src cannot be changed: its signature covers w and h).
  let side = 0;
  // Each tile's image from its done on, whether or not it has loaded (it joins the frame
  // only once it has): a tile still loading when the tiles grow is asked again too.
  const images = new WeakMap();
  const measure = () => Math.round(tiles[0].querySelector(".frame").getBoundingClientRect().width * (window.devicePixelRatio || 1));
  const resized = (src) => src.replace(/([?&])w=\d+/, `$1w=${side}`).replace(/([?&])h=\d+/, `$1h=${side}`);
  // A signed src cannot be changed (its signature covers w and h), nor a preset's.
  const resizable = (src) => !preset && !src.includes("sig=");
  const sizer = new ResizeObserver(() => {
    if (!tiles.length || !side) return;
    const now = measure();
    if (now <= side * 1.1) return;  // smaller or about the same: the browser scales down
    side = now; grid.dataset.side = side;
    for (const el of tiles) {
      const img = images.get(el);
      if (img && el.dataset.src && resizable(el.dataset.src)) img.src = resized(el.dataset.src);
    }
  });
  sizer.observe(grid);

  function finish(ok) {
    if (source) source.close();  // the server closes after "end"; do not reconnect
    if (observer) { observer.disconnect(); observer = null; }
    if (bar) bar.classList.toggle("done", ok);
    if (options.onEnd) options.onEnd(ok);
  }

"""#
}
