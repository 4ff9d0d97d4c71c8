extension ClientModule {
    /// The module from `start`: the batch opened (`openBatch`), its events painted into the tiles.
    static let tail = #"""
  // Resolves when the batch has ended (or was refused): with true when every tile is done.
  async function start(urls) {
    urls = (urls || []).map((s) => String(s).trim()).filter(Boolean);
    if (!urls.length) { say("Give at least one URL."); return false; }
    if (source) source.close();
    if (observer) observer.disconnect();
    grid.innerHTML = ""; delete grid.dataset.batch; if (bar) bar.classList.remove("done"); batch = null;
    totals = { total: urls.length, done: 0, failed: 0, cancelled: 0, bytes: 0, ended: false };
    render();
    // The tiles are laid out first: they are asked for at their displayed size ×
    // devicePixelRatio, in the best format this browser takes, with a tiny preview to paint
    // at once; and the ones on screen now are named in the POST, so they come first.
    tiles = urls.map((url) => tile({ url }));
    // Measured now: reading the layout lays the tiles out (the scrollbar they bring
    // included), so the POST need not wait for frames; tiles that grow later are asked
    // again (the sizer).
    side = measure() || 256; grid.dataset.side = side; grid.dataset.asked = side;
    const onScreen = new Set(tiles.map((el, i) => [el.getBoundingClientRect(), i])
      .filter(([r]) => r.bottom > 0 && r.top < innerHeight && r.right > 0 && r.left < innerWidth).map(([, i]) => i));
    tiles.forEach((el, i) => el.classList.toggle("offscreen", !onScreen.has(i)));
    // With a preset the tiles are asked with it alone (all thumbnails.onlyPresets allows), and
    // are not asked again when they grow.
    const asked = preset ? { preset } : { w: side, h: side, fit: "cover", format: "auto" };
    const opened = openBatch(urls.map((url, i) => ({ url, id: String(i) })),
                             { server, ...asked, preview: true, inline: true, focus: [...onScreen], cancelOffscreen });
    source = opened;
    const ended = new Promise((resolve) => opened.addEventListener("end", (e) => resolve(e.failed === 0 && e.cancelled === 0)));
    try {
      await opened.opened;
    } catch (e) {
      say(e.status ? `Refused: ${e.message || e.error}` : "thumbd is not reachable."); finish(false); return false;
    }
    batch = opened.id;
    opened.items.forEach((item, i) => { tiles[i].title = item.url; });
    if (options.onBatch) options.onBatch(batch);
    // As the user scrolls, thumbd hears what is on screen (at most every 100 ms): those
    // tiles go to the head of its queues.
    // Only a screen thumbd has not heard of is sent: the observer's first report repeats the
    // POST's focus, and sending it would hold the next (the user's first scroll) 100 ms back.
    const sent = batch;
    let timer = 0, pending = false, told = [...onScreen].sort((a, b) => a - b).join();
    const sendFocus = () => {
      const items = [...onScreen].sort((a, b) => a - b);
      if (batch !== sent || totals.ended || items.join() === told) return false;
      told = items.join();
      opened.focus(items).catch(() => {});
      return true;
    };
    observer = new IntersectionObserver((entries) => {
      for (const e of entries) {
        if (e.isIntersecting) onScreen.add(+e.target.dataset.index); else onScreen.delete(+e.target.dataset.index);
        e.target.classList.toggle("offscreen", !e.isIntersecting);
      }
      // At once, then at most every 100 ms while the user scrolls.
      if (timer) { pending = true; return; }
      if (!sendFocus()) return;
      timer = setTimeout(function next() {
        if (pending) { pending = false; sendFocus(); timer = setTimeout(next, 100); } else timer = 0;
      }, 100);
    });
    tiles.forEach((el, i) => { el.dataset.index = i; observer.observe(el); });
    const on = (type, handle) => opened.addEventListener(type, (e) => handle(e.data));
    // The daemon stopping (an upgrade, a restart): the stream reconnects by itself with
    // Last-Event-ID, and the batch goes on where it was.
    on("restarting", () => say("thumbd is restarting: reconnecting…"));
    on("reconnecting", () => say("thumbd is not reachable: reconnecting…"));
    on("connected", () => draw());
    on("progress", (d) => {
      const el = tiles[d.index];
      el.dataset.state = "fetching";
      if (!el.classList.contains("offscreen")) paint(() => {
        const pct = el.querySelector(".pct"), fill = el.querySelector(".fill");
        if (!pct) return;  // the tile's image or preview is painted already
        const spinner = el.querySelector(".spinner");
        if (spinner) spinner.replaceWith(glyph.content.firstChild.cloneNode(true));  // its bytes are coming: no more turning
        pct.textContent = d.total ? Math.round(100 * d.received / d.total) + "%" : kb(d.received);
        if (d.total) fill.style.width = Math.round(100 * d.received / d.total) + "%";
      });
    });
    // A preview made before its tile: painted blurred until the tile has loaded.
    // A preview event's preview is not painted once the tile's done has come (the tile is
    // about to be painted: with JPEG tiles done follows within a millisecond or two).
    const paintPreview = (el, uri, afterDone = false) => paint(() => {
      if (el.dataset.loaded === "1" || (!afterDone && el.dataset.state === "done") || el.querySelector("img.preview")) return;
      const preview = new Image();
      preview.className = "preview"; preview.alt = ""; preview.src = uri;
      el.querySelector(".frame").replaceChildren(preview);
    });
    on("preview", (d) => paintPreview(tiles[d.index], d.preview));
    on("done", (d) => {
      const el = tiles[d.index], frame = el.querySelector(".frame");
      if (el.dataset.state === "cancelled") { totals.cancelled--; el.className = "tile"; }  // back on screen, made after all
      const img = new Image();
      img.alt = fileName(d.url); img.decoding = "async";
      // A preview that came with done is painted only if the tile has not loaded a moment
      // later (from the cache it loads in milliseconds: painting it first would cost more).
      if (d.preview) setTimeout(() => paintPreview(el, d.preview, true), 100);
      // The tile replaces the placeholder or the preview once it has loaded (on screen, at
      // the next frame).
      img.onload = () => paint(() => { frame.replaceChildren(img); el.dataset.loaded = "1"; },
                               !el.classList.contains("offscreen"));
      // A tile that does not load after all (the cache purged meanwhile, the daemon gone) is
      // a failure, not a blurred preview counted as done; a re-ask at a larger size that fails
      // keeps the tile it had.
      img.onerror = () => {
        if (el.dataset.loaded === "1" || el.dataset.state !== "done") return;
        el.dataset.loaded = "0"; el.dataset.state = "failed";
        const box = document.createElement("div");
        box.className = "broken"; box.innerHTML = brokenIcon;
        box.appendChild(document.createTextNode("the image did not load"));
        frame.replaceChildren(box);
        totals.done--; totals.failed++; render();
      };
      el.dataset.src = d.src; images.set(el, img);
      // A small tile comes inside the event: no request for it (unless the tiles grew since).
      img.src = side > +grid.dataset.asked && resizable(d.src) ? resized(d.src) : (d.inline || d.src);
      el.dataset.state = "done"; el.dataset.cache = d.cache;
      totals.done++; totals.bytes += d.bytes; render();
    });
    on("failed", (d) => {
      const el = tiles[d.index];
      const box = document.createElement("div");
      box.className = "broken";
      box.innerHTML = brokenIcon;
      box.appendChild(document.createTextNode(`${d.status} · ${d.error}`));
      el.querySelector(".frame").replaceChildren(box);
      el.dataset.state = "failed"; el.title = d.message;
      totals.failed++; render();
    });
    on("cancelled", (d) => {
      const el = tiles[d.index];
      el.querySelector(".frame").innerHTML = '<div class="broken" style="color:var(--muted)">cancelled</div>';
      el.className = "tile cancelled"; el.dataset.state = "cancelled";
      totals.cancelled++; render();
    });
    on("end", (d) => {
      totals.ended = true; totals.ms = d.ms; draw();
      grid.dataset.batch = "ended";
      finish(d.failed === 0 && d.cancelled === 0);
    });
    return ended;
  }

  const close = () => {
    if (source) { source.close(); source = null; }
    if (observer) { observer.disconnect(); observer = null; }
    sizer.disconnect();
  };
  return {
    start,
    // What is still queued or in flight is cancelled; its tiles say so.
    cancel: () => { if (source) return source.cancel(); },
    close,
    get batch() { return batch; },
  };
}
"""#
}
