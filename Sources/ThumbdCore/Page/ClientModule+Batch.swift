extension ClientModule {
    /// `openBatch`: one batch as an `EventTarget` and an async iterator of its events, for a
    /// page's own grid. `<thumbd-img>` (ClientModule+Element.swift) is built on it.
    static let batch = #"""
// openBatch(items, options): one batch, as events. The returned object is an EventTarget
// (addEventListener("done", …)) and an async iterator of the same events as plain objects
// ({ type: "done", index, src, … }), from the first one whenever iteration starts.
//
//   const batch = openBatch(["https://example.org/a.jpg", { url: "https://example.org/b.png", w: 64 }],
//                           { w: 160, h: 160, fit: "cover", format: "auto", signal });
//   for await (const e of batch) if (e.type === "done") show(e.index, e.src);
//
// Event types: "open" (the batch is posted: id, items), "items" (items added), "progress",
// "preview", "done" (src: the tile's absolute URL; inline: its data URI when small),
// "failed" (status, error, message), "cancelled", "end" (the counts) and "error" (the batch
// was refused or thumbd is unreachable: status, error, message). The iterator ends after
// "end", and throws the "error" (and the signal's reason when aborted). Dispatched only, not
// iterated: "connected", "reconnecting" (the stream was lost; EventSource retries, and resumes
// with Last-Event-ID) and "restarting" (the daemon is stopping: the same, announced).
const BATCH_KEYS = ["w", "h", "dpr", "fit", "gravity", "fx", "fy", "crop", "bg", "blur", "sharpen", "rotate", "format",
                    "q", "progressive", "preset", "priority", "preview", "inline", "focus", "cancelOffscreen"];

// The batch's own events (the stream also says "shutdown", handled apart).
const RELAYED = ["progress", "preview", "done", "failed", "cancelled", "items", "end"];

export class ThumbdEvent extends Event {
  constructor(type, data) {
    super(type);
    this.data = data;
    for (const [key, value] of Object.entries(data)) if (!(key in this)) this[key] = value;
  }
}

export class ThumbdError extends Error {
  constructor(status, error, message) {
    super(message || error);
    this.name = "ThumbdError"; this.status = status; this.error = error;
  }
}

class Batch extends EventTarget {
  constructor(items, options) {
    super();
    this.server = (options.server || new URL(import.meta.url).origin).replace(/\/$/, "");
    this.id = null;
    this.items = [];
    this.log = [];  // every event so far, for the iterators
    this.wakers = new Set();
    this.finished = false;
    this.source = null;
    this.signal = options.signal || null;
    this.onPageHide = () => this.close();
    addEventListener("pagehide", this.onPageHide);
    if (this.signal) {
      this.onAbort = () => this.abort();
      if (this.signal.aborted) queueMicrotask(this.onAbort); else this.signal.addEventListener("abort", this.onAbort, { once: true });
    }
    const body = { items: items.map((item) => typeof item === "string" ? { url: item } : item) };
    for (const key of BATCH_KEYS) if (options[key] !== undefined) body[key] = options[key];
    // Resolves with the batch once it is posted; rejects with a ThumbdError when refused.
    this.opened = this.post("/batches", body, 201).then((answer) => {
      this.id = answer.id; this.items = answer.items;
      this.emit("open", { id: answer.id, items: answer.items });
      // The events already there come with the answer (a warm batch: every one, end
      // included). They are dispatched as the stream's would be, after whoever awaits
      // `opened` has run; the stream is read from after the last of them.
      setTimeout(() => {
        for (const e of answer.log || []) if (!this.finished && RELAYED.includes(e.event)) this.receive(e.event, e.data);
        if (!this.finished) this.listen(answer.events, answer.lastEventId || 0);
      });
      return this;
    });
    this.opened.catch(() => {});
  }

  async post(path, body, expected) {
    let response;
    try {
      response = await fetch(this.server + path, { method: "POST", signal: this.signal,
        headers: { "Content-Type": "application/json", "Accept": "image/avif,image/webp,*/*" }, body: JSON.stringify(body) });
    } catch (e) {
      if (this.signal && this.signal.aborted) throw this.signal.reason;
      return this.fail(new ThumbdError(0, "unreachable", "thumbd is not reachable at " + this.server));
    }
    const answer = await response.json().catch(() => ({}));
    if (response.status !== expected) return this.fail(new ThumbdError(response.status, answer.error, answer.message), path !== "/batches");
    return answer;
  }

  // A refusal: the batch's own ends it; one of add() is the caller's alone.
  fail(error, callerOnly = false) {
    if (!callerOnly) {
      this.failure = error;
      this.emit("error", { status: error.status, error: error.error, message: error.message });
      this.stop();
    }
    throw error;
  }

  // One event of the batch's, from the stream or from the POST's answer.
  receive(type, data) {
    if (type === "items") for (const item of data.items) this.items[item.index] = { ...this.items[item.index], ...item };
    if (type === "done") {
      data.src = this.server + data.src;
      if (this.items[data.index]) this.items[data.index].src = data.src;
    }
    this.emit(type, data);
    if (type === "end") this.stop();
  }

  // The stream, after event `after` (what the POST's answer carried).
  listen(path, after = 0) {
    const source = this.source = new EventSource(this.server + path + (after ? "?lastEventId=" + after : ""));
    for (const type of RELAYED) source.addEventListener(type, (e) => this.receive(type, JSON.parse(e.data)));
    // The stream's own state, dispatched but not iterated: the daemon is stopping (it comes
    // back and the stream resumes by itself), the stream is lost and being retried, it is open.
    source.addEventListener("shutdown", () => this.dispatchEvent(new ThumbdEvent("restarting", {})));
    source.onerror = () => {
      if (this.source === source && source.readyState === EventSource.CONNECTING) this.dispatchEvent(new ThumbdEvent("reconnecting", {}));
    };
    source.onopen = () => this.dispatchEvent(new ThumbdEvent("connected", {}));
  }

  emit(type, data) {
    this.log.push({ type, ...data });
    for (const wake of this.wakers) wake();
    this.dispatchEvent(new ThumbdEvent(type, data));
  }

  // Stops listening (after end, a refusal, close() or an abort); the iterators finish.
  stop() {
    this.finished = true;
    if (this.source) { this.source.close(); this.source = null; }
    removeEventListener("pagehide", this.onPageHide);
    if (this.signal && this.onAbort) this.signal.removeEventListener("abort", this.onAbort);
    for (const wake of this.wakers) wake();
  }

  // Which items are on screen now: they are fetched and made first.
  async focus(indices) {
    await this.opened;
    if (this.finished) return;
    await fetch(`${this.server}/batches/${this.id}/focus`, { method: "POST", headers: { "Content-Type": "application/json" },
                                                        body: JSON.stringify({ items: [...indices] }) });
  }

  // More items for this batch and its stream (numbered after the others); focus: which of
  // these are on screen. Rejects with a ThumbdError (error "batch_ended" once it has ended).
  async add(items, options = {}) {
    await this.opened;
    if (this.finished && !this.failure) throw new ThumbdError(409, "batch_ended", "the batch has ended");
    const body = { items: items.map((item) => typeof item === "string" ? { url: item } : item) };
    if (options.focus) body.focus = options.focus;
    const answer = await this.post(`/batches/${this.id}/items`, body, 200);
    for (const item of answer.items) this.items[item.index] = { ...this.items[item.index], ...item };
    return answer.items;
  }

  // Cancels what is still queued or in flight; the stream says so (cancelled, then end).
  async cancel() {
    await this.opened.catch(() => {});
    if (!this.id) return;
    await fetch(`${this.server}/batches/${this.id}`, { method: "DELETE", keepalive: true }).catch(() => {});
  }

  // The signal's abort: the batch is cancelled on the daemon and the iterators throw its reason.
  abort() {
    this.aborted = true;
    this.cancel();
    this.stop();
  }

  // Stops listening; the batch goes on in the daemon (its tiles are cached for next time).
  close() { this.stop(); }

  [Symbol.asyncIterator]() {
    let next = 0;
    return {
      next: () => new Promise((resolve, reject) => {
        const step = () => {
          if (next < this.log.length) {
            const event = this.log[next++];
            if (event.type === "error") { this.wakers.delete(step); reject(this.failure); return; }
            this.wakers.delete(step); resolve({ value: event, done: false }); return;
          }
          if (this.finished) {
            this.wakers.delete(step);
            if (this.aborted) reject(this.signal.reason); else resolve({ value: undefined, done: true });
          }
        };
        this.wakers.add(step);
        step();
      }),
      return: () => { this.close(); return Promise.resolve({ value: undefined, done: true }); },
    };
  }
}

export function openBatch(items, options = {}) {
  return new Batch(items || [], options);
}

// What changes in a grid's tiles (a preview, a loaded image, a percentage) is applied
// together: at the next frame, and at most every 50 ms. Each change on its own would be a
// frame for the browser to lay out and paint, and a grid's events and images come in bursts;
// a change after a quiet spell waits for the next frame only (a warm grid's tiles all load in
// one burst, which a fixed 50 ms held back). A tile loaded on screen (`soon`) is what the
// user waits for: it goes at the next frame, taking what is due with it, not up to 50 ms
// behind the tile before it (Sources/DECISIONS.md). createGrid and <thumbd-img> each have one.
function painter() {
  let due = [], timer = 0, frame = 0, last = -Infinity;
  const run = () => {
    clearTimeout(timer); cancelAnimationFrame(frame);
    timer = frame = 0; last = performance.now();
    const now = due; due = []; now.forEach((f) => f());
  };
  return (change, soon = false) => {
    due.push(change);
    if (frame || (timer && !soon)) return;
    const wait = last + 50 - performance.now();
    if (wait > 0 && !soon) { timer = setTimeout(run, wait); return; }
    frame = requestAnimationFrame(run);
    if (!timer) timer = setTimeout(run, 50);  // a hidden tab has no frames
  };
}
"""#
}
