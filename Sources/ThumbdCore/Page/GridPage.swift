import Support

/// `GET /`: paste image URLs, press Fetch, watch the grid fill from the batch's event
/// stream. The grid is `/thumbd.js` (ClientModule), as any page would use it; nothing comes
/// from elsewhere. `/?urls=<newline-separated>&autostart=1` fills the box and starts at
/// once (tests, links); `&cancelOffscreen=1` cancels tiles long off screen.
enum GridPage {
    /// The document: its markup and style, then the page's own few lines of script.
    /// `preset`: what every tile is asked with (`thumbnails.pagePreset`), named in a meta tag.
    static func html(preset: String?) -> Bytes {
        let escaped = preset.map { name in
            name.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;")
                .replacingOccurrences(of: "<", with: "&lt;")
        }
        let named = escaped.map { "<meta name=\"thumbd-preset\" content=\"\($0)\">\n" } ?? ""
        return Bytes(Array((markup.replacingOccurrences(of: "<title>", with: named + "<title>") + script + closing).utf8))
    }

    private static let script = #"""
import { createGrid } from "/thumbd.js";
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const grid = createGrid({
  grid: $("grid"), status: $("status"), bar: $("progress"), cancelOffscreen: params.get("cancelOffscreen") === "1",
  preset: document.querySelector('meta[name="thumbd-preset"]')?.content,
  onBatch: () => { $("cancel").disabled = false; },
  onEnd: () => {
    $("fetch").disabled = false; $("cancel").disabled = true;
    if ($("grid").dataset.batch === "ended") document.body.dataset.batch = "ended";
  },
});
function start() {
  const urls = $("urls").value.split(/\r?\n/).map((s) => s.trim()).filter(Boolean);
  if (!urls.length) { $("status").textContent = "Paste at least one URL."; return; }
  $("fetch").disabled = true;
  grid.start(urls);
}
$("fetch").addEventListener("click", start);
$("cancel").addEventListener("click", () => grid.cancel());
if (params.get("urls")) $("urls").value = params.get("urls");
if (params.get("autostart") === "1") start();
"""#

    private static let markup = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>thumbd</title>
<link rel="modulepreload" href="/thumbd.js">
<style>
  :root { --bg:#f6f7f9; --card:#fff; --ink:#1d2430; --muted:#6b7280; --line:#e3e6eb; --accent:#2563eb; --bad:#b42318; }
  * { box-sizing: border-box; }
  body { margin:0; font:15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background:var(--bg); color:var(--ink); }
  header { padding:16px 20px 4px; }
  h1 { margin:0; font-size:20px; letter-spacing:-.01em; }
  header p { margin:2px 0 0; color:var(--muted); font-size:13px; }
  main { padding:12px 20px 40px; max-width:1100px; margin:0 auto; }
  textarea { width:100%; min-height:110px; padding:10px 12px; border:1px solid var(--line); border-radius:10px;
             font:13px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; background:var(--card); resize:vertical; }
  .bar { display:flex; gap:10px; align-items:center; margin:10px 0 14px; flex-wrap:wrap; }
  button { border:0; border-radius:8px; padding:9px 16px; font:inherit; font-weight:600; cursor:pointer; }
  #fetch { background:var(--accent); color:#fff; }
  #cancel { background:#e8eaee; color:var(--ink); }
  button:disabled { opacity:.45; cursor:default; }
  #status { color:var(--muted); font-size:13px; flex:1; min-width:200px; }
  .progress { height:6px; background:#e5e7eb; border-radius:99px; overflow:hidden; margin-bottom:16px; }
  .progress > div { height:100%; width:0; background:var(--accent); }
  .progress.done > div { background:#16a34a; }
  @media (max-width: 480px) { main, header { padding-left:12px; padding-right:12px; } }
  /* The tiles' own look comes with /thumbd.js. */
</style>
</head>
<body>
<header><h1>thumbd</h1><p>Paste image URLs, one per line. The grid fills in as each image arrives.</p></header>
<main>
  <textarea id="urls" placeholder="https://example.org/a.jpg&#10;https://example.org/b.png" spellcheck="false"></textarea>
  <div class="bar">
    <button id="fetch">Fetch</button>
    <button id="cancel" disabled>Cancel</button>
    <span id="status">Idle.</span>
  </div>
  <div class="progress" id="progress"><div></div></div>
  <div id="grid"></div>
</main>
<script type="module">
"""# + "\n"

    private static let closing = "\n" + #"""
</script>
</body>
</html>
"""#
}
