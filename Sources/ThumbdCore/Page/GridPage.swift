import Support

/// `GET /`: paste image URLs, press Fetch, watch the grid fill from the batch's event
/// stream. One self-contained document: no external scripts, fonts or styles.
/// `/?urls=<newline-separated>&autostart=1` fills the box and starts at once (tests, links).
enum GridPage {
    /// The document: its markup and style, then the script (GridPage+Script.swift).
    static let html = Bytes(Array((markup + script + closing).utf8))

    private static let markup = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>thumbd</title>
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
  #grid { display:grid; grid-template-columns:repeat(auto-fill, minmax(140px, 1fr)); gap:12px; }
  @media (max-width: 480px) { #grid { grid-template-columns:repeat(2, 1fr); gap:8px; } main, header { padding-left:12px; padding-right:12px; } }
  .tile { background:var(--card); border:1px solid var(--line); border-radius:10px; overflow:hidden; display:flex; flex-direction:column; }
  .frame { aspect-ratio:1; display:flex; align-items:center; justify-content:center; background:#f0f2f5; position:relative; }
  .frame img { width:100%; height:100%; object-fit:cover; display:block; }
  .frame img.preview { image-rendering:auto; opacity:.85; }
  /* A tile waits for its first bytes behind a spinner (eight steps a turn, paused off
     screen), then shows its progress as a still fill drawn when bytes come. Every animation
     is a frame to paint on each tick: with software rendering (no GPU) a grid of spinners
     and a transition on the bar took the CPU the images needed (the bottom screen came
     0.1-0.17 s later with them turning while the tiles downloaded). */
  .spinner { width:28px; height:28px; border:3px solid #d5d9e0; border-top-color:var(--accent); border-radius:50%; }
  .tile:not(.offscreen) .spinner { animation:spin .8s steps(8) infinite; }
  @keyframes spin { to { transform:rotate(360deg); } }
  .wait { width:30px; height:30px; color:#c4c9d2; }
  .fill { position:absolute; left:0; bottom:0; height:3px; width:0; background:var(--accent); }
  .pct { position:absolute; bottom:6px; right:8px; font-size:11px; color:var(--muted); }
  .broken { text-align:center; color:var(--bad); font-size:12px; padding:8px; }
  .broken svg { width:38px; height:38px; display:block; margin:0 auto 4px; }
  .cancelled .frame { opacity:.5; }
  .caption { padding:6px 8px; font-size:11px; color:var(--muted); white-space:nowrap; overflow:hidden; text-overflow:ellipsis; border-top:1px solid var(--line); }
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
<script>
"""# + "\n"

    private static let closing = "\n" + #"""
</script>
</body>
</html>
"""#
}
