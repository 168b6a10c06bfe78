// The live page: records and round views from GET /v1/live, read with
// fetch so that a token can go in the Authorization header. Without a
// token the page shows what is public (ranked submissions and rounds);
// with one, also that participant's dev submissions (an operator's:
// everything). A token comes from the form or from the address's
// fragment (#token=...), which never reaches the server; it is kept in
// this tab's sessionStorage only.
"use strict";
const KEY = "lowbarena-token";
const RECENT = 200;
const subs = new Map(), rounds = new Map();
const $ = id => document.getElementById(id);
const esc = s => String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;"}[c]));

function token() { return sessionStorage.getItem(KEY) || ""; }
function headers() { const t = token(); return t ? {Authorization: "Bearer " + t} : {}; }

function drawSubs() {
  const rows = [...subs.values()].sort((a, b) => (b.created_at || "").localeCompare(a.created_at || ""));
  $("subs").innerHTML = rows.map(r => {
    const st = (r.stages || []).map(s => `<span class="st ${esc(s.status)}" title="${esc(s.reason)}">${esc(s.name)}</span>`).join("");
    const ds = (r.result || {}).dev_score;
    const score = ds ? Number(ds.score).toFixed(4) + (ds.qualified ? "" : " (not qualified)") : "";
    const why = r.error ? `${esc(r.error.code)}: ${esc(r.error.message)}` : (ds && ds.reason ? esc(ds.reason) : "");
    const sim = (r.result || {}).simulated ? ` <span class="sim">simulated</span>` : "";
    return `<tr data-submission="${esc(r.id)}"><td><a href="/submissions/${encodeURIComponent(r.id)}"><code>${esc(r.id)}</code></a></td><td>${esc(r.participant)}</td><td>${esc(r.split)}</td><td>${esc(r.solution && r.solution.checkpoint)}</td>` +
      `<td>${esc(r.solution && r.solution.detected_precision)}</td><td>${st}</td><td>${score}${sim}</td><td>${why}</td></tr>`;
  }).join("");
}

function drawRounds() {
  const rows = [...rounds.values()].sort((a, b) => (b.started_at || "").localeCompare(a.started_at || ""));
  $("rounds").innerHTML = rows.map(r => {
    const steps = r.steps || [], ended = steps.filter(s => s.status && s.status !== "pending" && s.status !== "running").length;
    const now = steps.find(s => s.status === "running") || {};
    const res = r.result || {};
    const leader = res.leader ? `<a href="/submissions/${encodeURIComponent(res.leader)}">${esc(res.leader)}</a>${res.leader_changed ? " (changed)" : ""}` : "";
    return `<tr data-round="${esc(r.round_id)}"><td><a href="/rounds/${encodeURIComponent(r.round_id)}"><code>${esc(r.round_id)}</code></a></td><td>${esc(r.campaign)}</td>` +
      `<td><progress max="${steps.length || 1}" value="${ended}"></progress> ${ended}/${steps.length}</td>` +
      `<td title="${esc(r.message)}">${esc(now.name || (r.reason ? `${r.status}: ${r.reason}` : r.status))}</td><td>${leader}</td></tr>`;
  }).join("");
}

// Drawing is once a frame, whatever the events that came in it: a
// redraw per event made the first paint quadratic in the records.
let pending = null;
function handle(kind, data) {
  const v = JSON.parse(data);
  if (kind === "record") subs.set(v.id, v);
  if (kind === "round") rounds.set(v.round_id, v);
  pending = pending || requestAnimationFrame(() => { pending = null; drawSubs(); drawRounds(); });
}

let generation = 0;

async function follow() {
  const mine = ++generation;
  subs.clear(); rounds.clear(); drawSubs(); drawRounds();
  let who = "the public";
  if (token()) {
    const me = await fetch("/v1/me", {headers: headers(), cache: "no-store"}).catch(() => null);
    if (me && me.ok) { const m = await me.json(); who = `${m.name} (${m.kind})`; }
  }
  while (mine === generation) {
    try {
      // The newest RECENT records, then every change: not the whole
      // bucket (GET /v1/live?recent=).
      const resp = await fetch("/v1/live?recent=" + RECENT, {headers: headers(), cache: "no-store"});
      if (!resp.ok) {
        const body = await resp.json().catch(() => ({}));
        $("status").textContent = "refused: " + ((body.error || {}).message || resp.status);
        if (resp.status === 401) { sessionStorage.removeItem(KEY); $("signout").hidden = true; }
        await new Promise(ok => setTimeout(ok, 5000));
        continue;
      }
      $("status").textContent = "live, as " + who;
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      while (mine === generation) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i); buf = buf.slice(i + 2);
          let kind = "", data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("event: ")) kind = line.slice(7);
            if (line.startsWith("data: ")) data = line.slice(6);
          }
          if (kind && data) handle(kind, data);
        }
      }
      reader.cancel().catch(() => {});
    } catch (e) {
      $("status").textContent = "reconnecting…";
    }
    await new Promise(ok => setTimeout(ok, 2000));
  }
}

window.addEventListener("DOMContentLoaded", () => {
  const m = location.hash.match(/token=([A-Za-z0-9_]+)/);
  if (m) {
    sessionStorage.setItem(KEY, m[1]);
    history.replaceState(null, "", location.pathname);
  }
  $("signout").hidden = !token();
  $("signin").addEventListener("submit", e => {
    e.preventDefault();
    const t = $("token").value.trim();
    $("token").value = "";
    if (t) sessionStorage.setItem(KEY, t);
    $("signout").hidden = !token();
    follow();
  });
  $("signout").addEventListener("click", () => { sessionStorage.removeItem(KEY); $("signout").hidden = true; follow(); });
  follow();
});
