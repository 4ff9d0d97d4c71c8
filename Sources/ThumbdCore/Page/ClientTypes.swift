import Support

/// `GET /thumbd.d.ts`: the TypeScript declarations of `/thumbd.js`, for a page's own build
/// (`curl -o src/thumbd.d.ts http://127.0.0.1:8080/thumbd.d.ts`, or a `declare module`).
enum ClientTypes {
    static let body = Bytes(Array(text.utf8))

    static let text = #"""
// TypeScript declarations of thumbd's /thumbd.js (served at /thumbd.d.ts).

/** The thumbnail parameters of a batch, or of one item (an item's own win). */
export interface ThumbnailParameters {
  w?: number; h?: number; dpr?: number;
  fit?: "cover" | "contain" | "fill" | "inside";
  gravity?: string; fx?: number; fy?: number; crop?: string; bg?: string;
  blur?: number; sharpen?: number; rotate?: 90 | 180 | 270;
  format?: "jpeg" | "png" | "webp" | "avif" | "auto";
  q?: number; progressive?: boolean | 0 | 1;
  /** A named set of parameters from the daemon's settings (all a page may ask under thumbnails.onlyPresets). */
  preset?: string;
}

/** One item: a URL, or a URL with a tag of yours, its own parameters and its signature. */
export type BatchItem = string | (ThumbnailParameters & {
  url: string;
  id?: string;
  /** Made by your page's server with the signing key, never in the browser. */
  sig?: string;
});

export interface BatchOptions extends ThumbnailParameters {
  /** The daemon (default: the one this module came from). */
  server?: string;
  priority?: "high" | "normal" | "low";
  /** A tiny blurred preview per item (preview events, or inside done). */
  preview?: boolean;
  /** Small tiles inside done, as data URIs. */
  inline?: boolean;
  /** The items on screen now: fetched and made first. */
  focus?: number[];
  /** Items that left the screen long ago are cancelled, and asked again when they come back. */
  cancelOffscreen?: boolean;
  /** Aborting cancels the batch on the daemon; the iterators throw the signal's reason. */
  signal?: AbortSignal;
}

export interface CreatedItem { index: number; id: string | null; url: string; src: string | null; }

export interface BatchEventMap {
  open: { id: string; items: CreatedItem[] };
  items: { from: number; items: { index: number; id: string | null; url: string }[] };
  progress: { index: number; received: number; total: number | null };
  preview: { index: number; id: string | null; preview: string };
  done: {
    index: number; id: string | null; url: string;
    /** The tile's absolute URL (answered from the cache). */
    src: string;
    status: number; bytes: number; contentType: string;
    cache: "hit" | "miss" | "coalesced" | "stale" | "revalidated"; ms: number;
    preview?: string;
    /** The tile itself as a data URI, when it is small and the batch asked inline. */
    inline?: string;
  };
  failed: { index: number; id: string | null; url: string; status: number; error: string; message: string };
  cancelled: { index: number; id: string | null; url: string };
  end: { total: number; done: number; failed: number; cancelled: number; ms: number };
  /** The batch was refused, or thumbd is not reachable (status 0). */
  error: { status: number; error: string; message: string };
}

/** The stream's own state: dispatched as events, not yielded by the iterator. */
export interface ConnectionEventMap {
  connected: {};
  /** The stream was lost; EventSource retries and resumes with Last-Event-ID. */
  reconnecting: {};
  /** The daemon is stopping; the stream resumes by itself once it is back. */
  restarting: {};
}

export type BatchEvent = { [K in keyof BatchEventMap]: { type: K } & BatchEventMap[K] }[keyof BatchEventMap];

/** An event dispatched on a ThumbdBatch: its data, also as the event's own fields. */
type AllEvents = BatchEventMap & ConnectionEventMap;
export declare class ThumbdEvent<K extends keyof AllEvents = keyof AllEvents> extends Event {
  readonly data: AllEvents[K];
}
export type ThumbdEventOf<K extends keyof AllEvents> = ThumbdEvent<K> & AllEvents[K];

/** A refusal: the HTTP status (0: not reachable), thumbd's error code and its message. */
export declare class ThumbdError extends Error {
  readonly status: number;
  readonly error: string;
}

export interface ThumbdBatch extends EventTarget, AsyncIterable<BatchEvent> {
  /** The batch's id, once posted. */
  readonly id: string | null;
  readonly items: CreatedItem[];
  readonly server: string;
  /** Resolves once the batch is posted; rejects with a ThumbdError when it is refused. */
  readonly opened: Promise<ThumbdBatch>;
  /** True after end, a refusal, close() or an abort. */
  readonly finished: boolean;
  /** The items on screen now: fetched and made first. */
  focus(indices: Iterable<number>): Promise<void>;
  /** More items for this batch and its stream; rejects with error "batch_ended" once it has ended. */
  add(items: BatchItem[], options?: { focus?: number[] }): Promise<CreatedItem[]>;
  /** Cancels what is still queued or in flight (cancelled events, then end). */
  cancel(): Promise<void>;
  /** Stops listening; the batch goes on in the daemon. */
  close(): void;
  addEventListener<K extends keyof AllEvents>(type: K, listener: (event: ThumbdEventOf<K>) => void,
                                                  options?: boolean | AddEventListenerOptions): void;
  addEventListener(type: string, listener: EventListenerOrEventListenerObject | null,
                   options?: boolean | AddEventListenerOptions): void;
}

export declare function openBatch(items: BatchItem[], options?: BatchOptions): ThumbdBatch;

export interface GridOptions {
  grid: HTMLElement;
  status?: HTMLElement;
  bar?: HTMLElement;
  server?: string;
  cancelOffscreen?: boolean;
  style?: boolean;
  onBatch?(id: string): void;
  onProgress?(totals: { total: number; done: number; failed: number; cancelled: number; bytes: number; ended: boolean; ms?: number }): void;
  onEnd?(ok: boolean): void;
  /** Ask every tile with this preset alone (what thumbnails.onlyPresets allows), not at its laid-out size. */
  preset?: string;
}

export interface Grid {
  /** Resolves when the batch has ended (true: every tile done), or was refused (false). */
  start(urls: string[]): Promise<boolean>;
  cancel(): Promise<void> | undefined;
  close(): void;
  readonly batch: string | null;
}

export declare function createGrid(options: GridOptions): Grid;

/** <thumbd-img src width height alt …>: fires load and error as <img> does. */
export declare class ThumbdImg extends HTMLElement {
  src: string;
  readonly alt: string;
  /** queued, fetching, done, failed or cancelled. */
  readonly state: string;
  readonly complete: boolean;
  /** The tile's URL once it is made. */
  readonly currentSrc: string;
  /** Why it failed (after an error event). */
  readonly failure?: { status: number; error: string; message: string };
}

declare global {
  interface HTMLElementTagNameMap { "thumbd-img": ThumbdImg; }
}
"""#
}
