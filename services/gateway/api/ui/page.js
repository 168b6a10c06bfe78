// The pages' live part. Each page is drawn whole by the server, so it
// reads without this script; this script only follows the live stream
// (GET /v1/live, filtered to what the page shows) and, when what the
// page shows changes, asks the server for the page's <main> again
// (header Lowbarena-Fragment: main) and swaps it in: no reload, and the
// page is drawn by one renderer, the server's. A token (from the live
// page, or the address's #token=... fragment, which never reaches the
// server) is kept in this tab's sessionStorage and sent as
// Authorization, so a participant's dev submissions show too.
"use strict";
(() => {
  const KEY = "lowbarena-token";
  const main = document.getElementById("main");
  const status = document.getElementById("live-status");
  const m = location.hash.match(/token=([A-Za-z0-9_]+)/);
  if (m) {
    sessionStorage.setItem(KEY, m[1]);
    history.replaceState(null, "", location.pathname + location.search);
  }
  const token = () => sessionStorage.getItem(KEY) || "";
  const auth = () => (token() ? {Authorization: "Bearer " + token()} : {});
  // A link to a text the token may read (an engine patch's) is fetched
  // with the token and shown below its paragraph: a plain link would go
  // without it. A second click hides it. What is shown stays shown when
  // the live page is drawn again.
  const opened = new Map();
  const show = (a, text) => {
    const pre = document.createElement("pre");
    pre.id = a.id + "-body";
    pre.className = "logtail";
    pre.textContent = text;
    a.closest("p").after(pre);
  };
  const reopen = () => {
    for (const [id, text] of opened) {
      const a = document.getElementById(id);
      if (a && !document.getElementById(id + "-body")) show(a, text);
    }
  };
  document.addEventListener("click", async ev => {
    const a = ev.target.closest && ev.target.closest("a[data-auth-text]");
    if (!a) return;
    ev.preventDefault();
    const shown = document.getElementById(a.id + "-body");
    if (shown) { shown.remove(); opened.delete(a.id); return; }
    let text;
    try {
      const resp = await fetch(a.getAttribute("href"), {headers: auth(), cache: "no-store"});
      text = resp.ok ? await resp.text()
        : ((await resp.json().catch(() => ({}))).error || {}).message || "HTTP " + resp.status;
    } catch (e) {
      text = "the arena does not answer: " + e;
    }
    opened.set(a.id, text);
    reopen();
  });
  const follow = main && main.dataset.live;
  if (!follow) {
    if (status) status.textContent = "";
    return;
  }
  const [kind, id] = follow.split(/:(.*)/s);
  const filter = {record: "submission", round: "round", participant: "participant"}[kind];
  const stream = "/v1/live?" + (filter ? filter + "=" + encodeURIComponent(id) : "only=records");
  // Many records change at once on a list: draw a list at most every
  // 1.5 s, a single record or round within 0.25 s.
  const wait = filter === "submission" || filter === "round" ? 250 : 1500;
  let timer = 0, drawing = false, again = false, draws = 0;
  const say = text => { if (status) status.textContent = text; };

  async function draw() {
    if (drawing) { again = true; return; }
    drawing = true;
    try {
      const resp = await fetch(location.pathname + location.search,
        {headers: Object.assign({"Lowbarena-Fragment": "main"}, auth()), cache: "no-store"});
      // An error page is a page too (a record not there yet, a token
      // refused): it says what is not there.
      const html = await resp.text();
      if (html.trim() !== "") {
        main.innerHTML = html;
        reopen();
        draws++;
        main.dataset.draws = String(draws);
      }
    } catch (e) {
      say("reconnecting…");
    } finally {
      drawing = false;
      if (again) { again = false; schedule(); }
    }
  }
  function schedule() {
    if (!timer) timer = setTimeout(() => { timer = 0; draw(); }, wait);
  }

  async function listen() {
    for (;;) {
      try {
        const resp = await fetch(stream, {headers: auth(), cache: "no-store"});
        if (!resp.ok) {
          const body = await resp.json().catch(() => ({}));
          say("not live: " + ((body.error || {}).message || resp.status));
          if (resp.status === 401) sessionStorage.removeItem(KEY);
          await new Promise(ok => setTimeout(ok, 5000));
          continue;
        }
        say("live");
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const {value, done} = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            if (/^event: (record|round)$/m.test(block)) schedule();
          }
        }
      } catch (e) {
        // The stream broke (the gateway restarted, the network went):
        // follow again.
      }
      say("reconnecting…");
      await new Promise(ok => setTimeout(ok, 2000));
    }
  }
  // With a token the server's first paint was the public's: draw again
  // as the token's holder at once.
  if (token()) draw();
  listen();
})();
