extension ClientModule {
    /// `<thumbd-img>`: a custom element any framework renders; every element of a page for
    /// one daemon shares one batch (`openBatch`, then `POST /batches/<id>/items`) and its stream.
    static let element = #"""
// <thumbd-img src="https://…/a.jpg" width="160" height="160" alt="…">: an image through
// thumbd that any framework can render. Every element of a page (for one daemon) joins one
// batch and its one event stream: what is on screen is asked first, what scrolls away long
// enough is cancelled (and asked again when it comes back), a preview is painted until the
// tile loads, a placeholder when it fails, and a restart of the daemon is followed. An
// element removed and added again (a re-render, a virtual list's recycling) finds its item
// where it was: nothing is asked twice. It fires "load" and "error" as <img> does.
//
// Attributes: src, width and height (CSS pixels: the tile is asked at width × dpr), alt,
// and the thumbnail parameters fit (default cover), format (default auto), gravity, q, bg,
// blur, sharpen, rotate, crop, fx, fy, progressive, preset, sig, dpr (default: the screen's).
// With preset, only the preset (and the parameters set as attributes) is asked: what
// thumbnails.onlyPresets allows. With sig, exactly what the attributes say is asked (width as
// w, height as h, no defaults, no dpr unless set), as the page's server signed it. The
// daemon is the one this module came from; another: <thumbd-img server="http://…">.
const ELEMENT_PARAMS = ["fit", "format", "gravity", "fx", "fy", "crop", "bg", "blur", "sharpen", "rotate", "q",
                        "progressive", "preset", "sig", "dpr"];
const hubs = new Map();
const moduleServer = new URL(import.meta.url).origin;

// The elements of one daemon: their items by what they ask, and the page's batch.
class Hub {
  constructor(server) {
    this.server = server;
    this.records = new Map();  // what an item asks (JSON) → { item, batch, index, state, last, preview, elements }
    this.pending = [];
    this.batch = null;
    this.flushing = Promise.resolve();
    this.scheduled = false;
    this.visible = new Set();
    this.reported = new WeakSet();  // elements the observer has reported at least once
    this.told = "";
    this.timer = 0;
    this.again = false;
    this.observer = new IntersectionObserver((entries) => {
      for (const e of entries) {
        this.reported.add(e.target);
        if (!e.isIntersecting) { this.visible.delete(e.target); continue; }
        this.visible.add(e.target);
        // Cancelled off screen by a batch that has ended since (it starts nothing again): asked anew.
        const record = e.target.record;
        if (record && record.state === "cancelled" && record.batch && record.batch.finished) this.queue(record);
      }
      this.screenChanged();
    });
  }

  attach(el) {
    const item = el.item();
    if (!item) return;
    const key = JSON.stringify(item);
    let record = this.records.get(key);
    if (!record) this.records.set(key, record = { item, batch: null, index: -1, state: "new", last: null, preview: null, elements: new Set() });
    record.elements.add(el);
    el.record = record;
    this.observer.observe(el);
    el.paint(record);
    // New, or cancelled off screen by a batch that has ended since (it starts nothing again).
    if (record.state === "new" || (record.state === "cancelled" && record.batch && record.batch.finished)) this.queue(record);
  }

  detach(el) {
    const record = el.record;
    if (!record) return;
    record.elements.delete(el);
    el.record = null;
    this.observer.unobserve(el);
    this.visible.delete(el);
    this.screenChanged();
  }

  queue(record) {
    record.state = "queued";
    this.pending.push(record);
    if (this.scheduled) return;
    this.scheduled = true;
    // After layout (what is on screen is known), as one request for all the elements a
    // render added; 50 ms at most (a hidden tab has no frames).
    const go = () => {
      if (!this.scheduled) return;
      this.scheduled = false;
      this.flushing = this.flushing.then(() => this.flush());
    };
    requestAnimationFrame(go); setTimeout(go, 50);
  }

  onScreen(record) {
    for (const el of record.elements) {
      if (this.visible.has(el)) return true;
      const r = el.getBoundingClientRect();
      if (r.bottom > 0 && r.top < innerHeight && r.right > 0 && r.left < innerWidth && r.width + r.height > 0) return true;
    }
    return false;
  }

  async flush() {
    const records = this.pending.splice(0).filter((r) => r.elements.size && r.state === "queued");
    if (!records.length) return;
    const items = records.map((r) => r.item);
    const focus = records.map((r, i) => this.onScreen(r) ? i : -1).filter((i) => i >= 0);
    if (this.batch && !this.batch.finished) {
      try {
        const added = await this.batch.add(items, { focus });
        added.forEach((item, i) => this.bind(records[i], this.batch, item.index));
        this.tellLate(records);
        return;
      } catch (e) {
        if (e.error !== "batch_ended") { records.forEach((r) => this.settle(r, "failed", e)); return; }
      }
    }
    // The first elements, or the page's batch has ended: a new batch for these.
    const batch = openBatch(items, { server: this.server, focus, preview: true, inline: true, cancelOffscreen: true });
    batch.records = new Map();  // index → record
    batch.early = new Map();    // index → events that came before the answer naming it (an added item)
    this.batch = batch; this.told = focus.join();
    for (const type of ["progress", "preview", "done", "failed", "cancelled"]) {
      batch.addEventListener(type, (e) => {
        const record = batch.records.get(e.index);
        if (record) { if (record.batch === batch) this.apply(record, type, e.data); }
        else (batch.early.get(e.index) || batch.early.set(e.index, []).get(e.index)).push([type, e.data]);
      });
    }
    try {
      await batch.opened;
      records.forEach((r, i) => this.bind(r, batch, i));
      this.tellLate(records);
    } catch (e) {
      records.forEach((r) => this.settle(r, "failed", e));
    }
  }

  bind(record, batch, index) {
    record.batch = batch; record.index = index;
    batch.records.set(index, record);
    for (const [type, data] of batch.early.get(index) || []) this.apply(record, type, data);
    batch.early.delete(index);
  }

  apply(record, type, data) {
    if (type === "progress") { record.progress = data.total ? data.received / data.total : null; record.state = "fetching"; }
    else if (type === "preview") record.preview = data.preview;
    else this.settle(record, type, data);
    for (const el of record.elements) el.paint(record);
  }

  settle(record, state, data) {
    record.state = state; record.last = data;
    if (state === "done" && data.preview) record.preview = data.preview;
    for (const el of record.elements) el.paint(record);
  }

  // The indices of the page's batch on screen now, told at once, then at most every 100 ms.
  screenChanged() {
    if (this.timer) { this.again = true; return; }
    if (!this.tell()) return;
    const next = () => {
      if (!this.again) { this.timer = 0; return; }
      this.again = false; this.tell();
      this.timer = setTimeout(next, 100);
    };
    this.timer = setTimeout(next, 100);
  }

  // The screen may have changed while these records' POST was out (the page scrolled at
  // once): the observer's reports then found nothing to tell, so the screen now is told.
  // An element not reported yet will be, and its report tells.
  tellLate(records) {
    if (records.every((r) => [...r.elements].every((el) => this.reported.has(el)))) this.screenChanged();
  }

  tell() {
    const batch = this.batch;
    if (!batch || batch.finished || batch.id === null) return false;
    const indices = [...new Set([...this.visible].map((el) => el.record).filter((r) => r && r.batch === batch).map((r) => r.index))]
      .sort((a, b) => a - b);
    if (indices.join() === this.told) return false;
    this.told = indices.join();
    batch.focus(indices).catch(() => {});
    return true;
  }
}

// One style sheet for every element's shadow root (adopted, not a <style> copied into each:
// a grid of them would be as many sheets to match). The size comes from the attributes as
// custom properties, so that a page's own width and height win.
const CSS = ':host{display:inline-block;position:relative;overflow:hidden;vertical-align:top;background:#eef0f3;' +
  'width:var(--thumbd-width,auto);height:var(--thumbd-height,auto)}' +
  'img{width:100%;height:100%;object-fit:cover;display:block}img.preview{filter:blur(4px)}' +
  '.bar{position:absolute;left:0;bottom:0;height:3px;width:0;background:#2563eb}' +
  'svg{position:absolute;inset:0;margin:auto;width:40%;height:40%;color:#b42318}';
let sheet = null;
try { sheet = new CSSStyleSheet(); sheet.replaceSync(CSS); } catch (e) { sheet = null; }

// What changes in the elements is applied together, as createGrid does (painter()).
const swap = painter();
const BROKEN = '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="1.6"><rect x="3" y="3" width="18" height="18" rx="3"/><path d="M8 8l8 8M16 8l-8 8"/></svg>';

export class ThumbdImg extends HTMLElement {
  static observedAttributes = ["src", "width", "height", "alt", "server", ...ELEMENT_PARAMS];

  constructor() {
    super();
    this.record = null;
    this.shown = null;
    const root = this.attachShadow({ mode: "open" });
    if (sheet) root.adoptedStyleSheets = [sheet]; else root.innerHTML = "<style>" + CSS + "</style>";
  }

  get hub() {
    const server = (this.getAttribute("server") || moduleServer).replace(/\/$/, "");
    return hubs.get(server) || hubs.set(server, new Hub(server)).get(server);
  }

  connectedCallback() {
    this.size();
    this.hub.attach(this);
  }

  disconnectedCallback() {
    this.hub.detach(this);
  }

  attributeChangedCallback(name) {
    if (!this.isConnected) return;
    if (name === "width" || name === "height") this.size();
    if (name === "alt") { const img = this.shadowRoot.querySelector("img:not(.preview)"); if (img) img.alt = this.alt; return; }
    this.hub.detach(this);
    this.shown = null; this.loaded = false;
    this.hub.attach(this);
  }

  get alt() { return this.getAttribute("alt") || ""; }
  get src() { return this.getAttribute("src") || ""; }
  set src(value) { this.setAttribute("src", value); }
  // Like <img>: the tile has loaded, or failed.
  get complete() { return !!this.loaded || this.state === "failed"; }
  get state() { return this.getAttribute("state") || "queued"; }
  // The tile's URL once it is made (what an <img> of your own could show).
  get currentSrc() { return this.record && this.record.state === "done" ? this.record.last.src : ""; }

  size() {
    const w = +this.getAttribute("width"), h = +this.getAttribute("height");
    if (w) this.style.setProperty("--thumbd-width", w + "px"); else this.style.removeProperty("--thumbd-width");
    if (h) this.style.setProperty("--thumbd-height", h + "px"); else this.style.removeProperty("--thumbd-height");
  }

  // What this element asks of thumbd (one batch item).
  item() {
    const src = this.getAttribute("src");
    if (!src) return null;
    const item = { url: new URL(src, document.baseURI).href };
    const given = (name) => this.getAttribute(name);
    const signed = given("sig") !== null, preset = given("preset") !== null;
    if (!preset) {
      if (given("width")) item.w = +given("width");
      if (given("height")) item.h = +given("height");
    }
    if (!signed && !preset) {
      item.fit = "cover"; item.format = "auto";
      const dpr = Math.min(4, Math.max(1, Math.round((devicePixelRatio || 1) * 100) / 100));
      if (dpr !== 1) item.dpr = dpr;
    }
    for (const name of ELEMENT_PARAMS) if (given(name) !== null) item[name] = given(name);
    return item;
  }

  // Shows the item's state: a progress bar, the preview, the tile, or the placeholder.
  paint(record) {
    const root = this.shadowRoot;
    this.setAttribute("state", record.state === "new" ? "queued" : record.state);
    if (record.state === "done") {
      const src = record.last.inline || record.last.src;
      if (this.shown === src) return;
      this.shown = src;
      const img = new Image();
      img.alt = this.alt; img.decoding = "async";
      img.onload = () => swap(() => {
        if (this.shown !== src) return;
        root.querySelectorAll("img, svg, .bar").forEach((n) => n.remove());
        root.appendChild(img);
        this.loaded = true; this.setAttribute("loaded", "");
        this.dispatchEvent(new Event("load"));
      }, this.hub.visible.has(this));  // on screen: at the next frame
      img.onerror = () => {
        if (this.shown !== src) return;
        this.fail({ status: 0, error: "tile_not_loaded", message: "the tile did not load" });
      };
      img.src = src;
      return;
    }
    if (record.state === "failed") return this.fail(record.last || {});
    if (record.preview) swap(() => this.showPreview(record.preview));
    if (record.state === "fetching" && record.progress != null && !this.barDue) {
      this.barDue = true;
      swap(() => {
        this.barDue = false;
        if (this.loaded || this.shown) return;
        let bar = root.querySelector(".bar");
        if (!bar) { bar = document.createElement("span"); bar.className = "bar"; root.appendChild(bar); }
        bar.style.width = Math.round(100 * (record.progress || 0)) + "%";
      });
    }
  }

  showPreview(uri) {
    if (this.loaded || this.shown || this.shadowRoot.querySelector("img.preview")) return;
    const preview = new Image();
    preview.className = "preview"; preview.alt = ""; preview.src = uri;
    this.shadowRoot.appendChild(preview);
  }

  fail(failure) {
    if (this.shown === "failed") return;
    this.shown = "failed"; this.loaded = false;
    this.failure = { status: failure.status, error: failure.error, message: failure.message };
    this.setAttribute("state", "failed");
    this.shadowRoot.querySelectorAll("img, svg, .bar").forEach((n) => n.remove());
    const mark = document.createElement("template");
    mark.innerHTML = BROKEN;
    this.shadowRoot.appendChild(mark.content);
    this.title = failure.message || "";
    this.dispatchEvent(new Event("error"));
  }
}

if (typeof customElements !== "undefined" && !customElements.get("thumbd-img")) customElements.define("thumbd-img", ThumbdImg);
"""#
}
