// ctxbus web: one page, four views, refreshed on every server-sent "tick".
"use strict";

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en"));
const pct = (x) => (x === null || x === undefined ? "–" : `${Math.round(x * 100)}%`);
const ago = (s) => (s === null || s === undefined ? "" : `${Math.round(s)}s ago`);

const state = { view: "swarm", domain: null, agent: null, selectedRevision: null, search: "", charts: {} };

async function getJSON(url) {
  const r = await fetch(url);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
  return body;
}

function route() {
  const [view, ...rest] = (location.hash.slice(1) || "swarm").split(":");
  state.view = ["swarm", "agent", "brief", "health"].includes(view) ? view : "swarm";
  if (state.view === "agent" && rest.length >= 2) { state.domain = decodeURIComponent(rest[0]); state.agent = decodeURIComponent(rest[1]); }
  if (state.view === "brief" && rest.length >= 1) {
    const domain = decodeURIComponent(rest[0]);
    if (domain !== state.domain) state.selectedRevision = null;
    state.domain = domain;
  }
  for (const v of ["swarm", "agent", "brief", "health"]) {
    $(`view-${v}`).hidden = v !== state.view;
    $(`nav-${v}`).classList.toggle("active", v === state.view);
  }
  if (state.domain) {
    $("nav-brief").href = `#brief:${encodeURIComponent(state.domain)}`;
    if (state.agent) $("nav-agent").href = `#agent:${encodeURIComponent(state.domain)}:${encodeURIComponent(state.agent)}`;
  }
  refresh();
}

async function refresh() {
  try {
    if (state.view === "swarm") await showSwarm();
    else if (state.view === "agent") await showAgent();
    else if (state.view === "brief") await showBrief();
    else await showHealth();
  } catch (e) {
    const target = { swarm: "view-swarm", agent: "agent-summary", brief: "brief-at-hint", health: "view-health" }[state.view];
    $(target).innerHTML = `<span class="error">${esc(e.message)}</span>`;
  }
}

function coordinatorLine(c) {
  const cls = c.state.replace(" ", "-");
  if (c.state === "serving") return `<li><b>${esc(c.coordinator)}</b> <span class="${cls}">serving</span>: up ${Math.round(c.uptime_s)}s, ${fmt(c.commits)} commits (${c.commits_per_s}/s), ${c.domains.length} domains</li>`;
  const why = c.state === "stopped" ? "stopped" : "not answering: frozen, stuck or killed";
  return `<li><b>${esc(c.coordinator)}</b> <span class="${cls}">${why}</span> <span class="dim">(last heartbeat ${ago(c.last_heartbeat_s)})</span></li>`;
}

async function showSwarm() {
  const s = await getJSON("/api/swarm");
  if (!state.domain && s.domains.length) state.domain = s.domains[0].domain;
  let html = `<div class="card"><h3>Coordinators</h3><ul id="coordinators">${s.coordinators.map(coordinatorLine).join("") || "<li class='dim'>no coordinator is serving</li>"}</ul></div>`;
  if (!s.domains.length) html += `<p class="dim">No domain seen yet: no agent's heartbeat, no coordinator caching one.</p>`;
  for (const d of s.domains) {
    const dq = encodeURIComponent(d.domain);
    html += `<div class="card domain" data-domain="${esc(d.domain)}"><h3>${esc(d.domain)} <a href="#brief:${dq}">brief</a></h3>`;
    html += `<p class="dim">cached by ${d.coordinators.map(esc).join(", ") || "no coordinator"}</p>`;
    html += `<table><tr><th>agent</th><th class="l">state</th><th class="l">band</th><th>U / T</th><th>U/T</th><th>prompt</th><th>cached</th><th>brief rev</th><th>lag</th><th>seen</th><th class="l">store</th></tr>`;
    for (const a of d.agents) {
      html += `<tr class="agent-row" data-agent="${esc(a.agent)}"><td><a href="#agent:${dq}:${encodeURIComponent(a.agent)}">${esc(a.agent)}</a></td>`
        + `<td class="l ${a.stale ? "stale" : "live"}">${a.stale ? `stale (${ago(a.age_s)})` : "live"}</td>`
        + `<td class="l band-${esc(a.band)}">${esc(a.band)}</td><td>${fmt(a.U)} / ${fmt(a.T)}</td><td>${pct(a.severity)}</td>`
        + `<td>${fmt(a.prompt)}</td><td>${pct(a.cached_share)}</td><td>${a.revision}</td><td>${a.lag}</td><td>${ago(a.age_s)}</td>`
        + `<td class="l">${a.store ? "readable" : "<span class='dim'>heartbeats only</span>"}</td></tr>`;
    }
    if (!d.agents.length) html += `<tr><td colspan="11" class="dim">no agents</td></tr>`;
    html += `</table></div>`;
  }
  $("view-swarm").innerHTML = html;
}

// A uPlot chart kept across refreshes; created again when its series change.
function chart(id, key, opts, data) {
  const el = $(id);
  const points = data[0].length;
  el.dataset.points = String(points);
  let c = state.charts[id];
  if (!c || c.key !== key) {
    if (c) c.plot.destroy();
    el.innerHTML = "";
    c = state.charts[id] = { key, plot: new uPlot({ width: 560, height: 240, ...opts }, data, el) };
  } else {
    c.plot.setData(data);
  }
}

// Channel 1/2 events of the agent shown, read at each draw (the chart outlives one fetch).
let channelEvents = [];
function markerPlugin() {
  return {
    hooks: {
      draw: (u) => {
        const ctx = u.ctx;
        ctx.save();
        for (const e of channelEvents) {
          const x = u.valToPos(e.at, "x", true);
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.strokeStyle = e.channel === 2 ? "#a21caf" : "#ca8a04";
          ctx.setLineDash([4, 3]);
          ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
          ctx.fillStyle = ctx.strokeStyle;
          ctx.fillText(`Ch${e.channel}`, x + 3, u.bbox.top + 10);
        }
        ctx.restore();
      },
    },
  };
}

const LAYERS = ["system", "pinned", "authored", "summary", "brief", "rolling", "input"];
// An authored item's lines: how many the prompt shows, and what happened to the rest.
const compressed = (i) => {
  const done = [[i.folded, "folded"], [i.archived, "archived"], [i.deduped, "repeats left out"]].filter(([n]) => n).map(([n, what]) => `${fmt(n)} ${what}`);
  return `${fmt(i.lines)} lines${done.length ? ": " + done.join(", ") : ", verbatim"}`;
};
const COLORS = { system: "#94a3b8", pinned: "#2563eb", authored: "#db2777", summary: "#7c3aed", brief: "#0891b2", rolling: "#16a34a", input: "#f59e0b" };

async function showAgent() {
  if (!state.domain || !state.agent) return;
  const a = await getJSON(`/api/agent?domain=${encodeURIComponent(state.domain)}&agent=${encodeURIComponent(state.agent)}`);
  $("agent-title").textContent = `${a.agent} on ${a.domain}`;
  $("agent-summary").innerHTML = `<span class="band-${esc(a.band)}">${esc(a.band)}</span>, U ${fmt(a.U)} / T ${fmt(a.T)} (${pct(a.severity)}), prompt ${fmt(a.prompt)} tokens, cached ${pct(a.cached_share)}, brief rev ${a.revision}, lag ${a.lag}, `
    + `<span class="${a.stale ? "stale" : "live"}">${a.stale ? "stale" : "live"}</span> (${ago(a.age_s)}). ${a.samples.length} samples since this page's server started.`
    + (a.store_note ? ` <span class="dim">${esc(a.store_note)}</span>` : "");
  const xs = a.samples.map((s) => s.at);
  const t = a.thresholds;
  const share = a.samples.map((s) => (s.T ? s.U / s.T : 0));
  const flat = (v) => xs.map(() => v);
  channelEvents = a.events;
  $("chart-ut").dataset.events = String(a.events.length);
  chart("chart-ut", `ut-${a.agent}`, {
    plugins: [markerPlugin()],
    scales: { x: { time: true }, share: { range: [0, 1] } },
    axes: [{}, { label: "tokens", size: 60 }, { scale: "share", side: 1, label: "U/T", grid: { show: false } }],
    series: [{}, { label: "T", stroke: "#2563eb" }, { label: "U", stroke: "#dc2626" },
      { label: "U/T", scale: "share", stroke: "#111", width: 1 },
      ...Object.entries(t).map(([band, v]) => ({ label: `${band} ≥ ${v}`, scale: "share", stroke: band === "channel2" ? "#a21caf" : "#ca8a04", dash: [5, 5], width: 1, points: { show: false } }))],
  }, [xs, a.samples.map((s) => s.T), a.samples.map((s) => s.U), share, ...Object.values(t).map(flat)]);

  // Per layer where the store was read with a heartbeat (every other one or so): the gaps are spanned.
  const withLayers = a.samples.some((s) => s.layers);
  if (withLayers) {
    // Stacked: each series is the sum of its layer and those below; the tallest is drawn first.
    const names = LAYERS.filter((n) => a.samples.some((s) => s.layers && s.layers[n]));
    const cum = names.map((_, i) => a.samples.map((s) => (s.layers ? names.slice(0, i + 1).reduce((acc, n) => acc + (s.layers[n] || 0), 0) : null)));
    const order = names.map((_, i) => i).reverse();
    chart("chart-layers", `layers-${a.agent}-${names.join()}`, {
      scales: { x: { time: true } }, axes: [{}, { label: "tokens", size: 60 }],
      series: [{}, ...order.map((i) => ({ label: names[i], stroke: COLORS[names[i]], fill: COLORS[names[i]] + "cc", spanGaps: true }))],
    }, [xs, ...order.map((i) => cum[i])]);
  } else {
    chart("chart-layers", `prompt-${a.agent}`, {
      scales: { x: { time: true } }, axes: [{}, { label: "tokens", size: 60 }],
      series: [{}, { label: "prompt (heartbeats; no store readable)", stroke: "#16a34a", fill: "#16a34a55" }],
    }, [xs, a.samples.map((s) => s.prompt)]);
  }
  chart("chart-cache", `cache-${a.agent}`, {
    scales: { x: { time: true }, y: { range: [0, 1] } }, axes: [{}, { label: "cached share", size: 60 }],
    series: [{}, { label: "cached share (null: the model reports none)", stroke: "#0891b2", spanGaps: false }],
  }, [xs, a.samples.map((s) => s.cached_share)]);

  if (!a.layers) { $("agent-layers").innerHTML = `<p class="dim">${esc(a.store_note || "no store read yet")}</p>`; return; }
  $("agent-layers").innerHTML = a.layers.map((v) => `<div class="layer" data-layer="${esc(v.layer)}"><h4>${esc(v.layer)}: ${fmt(v.tokens)} / ${fmt(v.budget)} tokens, ${v.items.length} items</h4>${v.note ? `<p class="dim note">${esc(v.note)}</p>` : ""}`
    + v.items.map((i) => `<div class="item${i.reminder ? " reminder" : ""}" title="${esc(i.text)}"><span class="tag">${i.tag === null ? "" : `§${i.tag}§ `}</span><span class="dim">${esc(i.kind)} (${fmt(i.tokens)}${i.lines ? `; ${compressed(i)}` : ""})</span> ${esc((i.text.split("\n")[0] || "").slice(0, 160))}</div>`).join("")
    + `</div>`).join("");
}

async function showBrief() {
  if (!state.domain) { $("brief-at-hint").textContent = "Pick a domain in the Swarm view."; return; }
  const dq = encodeURIComponent(state.domain);
  const b = await getJSON(`/api/brief?domain=${dq}&q=${encodeURIComponent(state.search)}`);
  $("brief-title").textContent = `Brief of ${b.domain}: revision ${b.brief.revision}`;
  $("brief-now").textContent = b.brief.text;
  $("brief-rejected").innerHTML = b.brief.rejected.map((r) => `<li><b>${esc(r.option)}</b> by ${esc(r.by)} at rev ${r.revision}: ${esc(r.reason)}</li>`).join("") || "<li class='dim'>none</li>";
  const refused = Object.entries(b.refused).map(([k, v]) => `${k} ${v}`).join(", ");
  $("brief-refused").textContent = `Proposals refused by the coordinators (all domains, by code): ${refused || "none"}. A refusal's text goes to its proposer only; the log holds what was committed.`;
  let rows = b.timeline.map((r) => r.revision === null
    ? `<li class="${r.kind}"><span class="rev">seq ${r.seq}</span>${esc(r.text)}</li>`
    : `<li class="${r.kind}${r.revision === state.selectedRevision ? " selected" : ""}" data-revision="${r.revision}" data-kind="${r.kind}"><span class="rev">r${r.revision}</span>`
      + `<span class="dim">${new Date(r.ts * 1000).toLocaleTimeString()}</span> ${esc(r.text)}${r.kind === "no_effect" ? " <i>(no effect)</i>" : ""}</li>`);
  if (b.snapshot && !state.search) {
    const i = b.timeline.findIndex((r) => r.revision === b.snapshot.revision);
    rows.splice(i + 1, 0, `<li class="snapshot">latest snapshot: revision ${b.snapshot.revision} (log seq ${b.snapshot.seq})</li>`);
  }
  $("brief-timeline").innerHTML = rows.reverse().join("") || `<li class="dim">${state.search ? "nothing matches" : "the log is empty"}</li>`;
}

async function showRevision(revision) {
  state.selectedRevision = revision;
  for (const li of document.querySelectorAll("#brief-timeline li")) li.classList.toggle("selected", Number(li.dataset.revision) === revision);
  const r = await getJSON(`/api/brief/revision?domain=${encodeURIComponent(state.domain)}&revision=${revision}`);
  $("brief-at-title").textContent = `At revision ${r.brief.revision}`;
  $("brief-at-hint").textContent = `hash ${r.brief.hash.slice(0, 16)}`;
  $("brief-at").textContent = r.brief.text;
  $("brief-at").dataset.revision = String(r.brief.revision);
}

function counts(title, id, obj) {
  const rows = Object.entries(obj).map(([k, v]) => `<tr><td>${esc(k)}</td><td>${fmt(v)}</td></tr>`).join("");
  return `<div class="card"><h3>${title}</h3><table id="${id}">${rows || "<tr><td class='dim'>none</td></tr>"}</table></div>`;
}

async function showHealth() {
  const h = await getJSON("/api/health");
  let html = `<div class="card"><h3>Coordinators</h3><ul>${h.coordinators.map(coordinatorLine).join("") || "<li class='dim'>none</li>"}</ul></div>`;
  html += `<div class="cols">`;
  html += counts("Dead letters by reason (coordinators' counts)", "health-dead", h.dead_letters);
  html += counts("Rejection codes", "health-rejections", h.rejections);
  html += counts("Expired proposals", "health-expired", h.expired);
  html += `</div>`;
  const lat = Object.entries(h.commit_latency).map(([c, m]) => `<tr><td>${esc(c)}</td><td>${fmt(m.commits)}</td><td>${m.mean_ms ?? "–"}</td><td>≤ ${m.p50_ms ?? "–"}</td><td>≤ ${m.p95_ms ?? "–"}</td></tr>`).join("");
  html += `<div class="card"><h3>Commit latency (ms, from /metrics)</h3><table id="health-latency"><tr><th>coordinator</th><th>commits</th><th>mean</th><th>p50</th><th>p95</th></tr>${lat || "<tr><td colspan=5 class='dim'>no metrics yet</td></tr>"}</table>`
    + `<p class="dim">self-check failures: ${h.self_check_failures}</p></div>`;
  html += `<div class="card"><h3>Dead letters seen while this page ran</h3><table>${h.recent_dead_letters.map((d) => `<tr><td>${new Date(d.at * 1000).toLocaleTimeString()}</td><td class="l">${esc(d.domain || "(no domain)")}</td><td class="l">${esc(d.reason)}</td><td class="l">${esc(d.detail)}</td></tr>`).join("") || "<tr><td class='dim'>none</td></tr>"}</table></div>`;
  html += `<div class="card"><h3>Last errors</h3><table id="health-errors">${h.last_errors.map((e) => `<tr><td>${e.at ? new Date(e.at * 1000).toLocaleTimeString() : ""}</td><td class="l">${esc(e.source)}</td><td class="l">${esc(e.text)}</td></tr>`).join("") || "<tr><td class='dim'>none</td></tr>"}</table></div>`;
  $("view-health").innerHTML = html;
}

$("brief-timeline").addEventListener("click", (ev) => {
  const li = ev.target.closest("li[data-revision]");
  if (li) showRevision(Number(li.dataset.revision)).catch((e) => { $("brief-at-hint").innerHTML = `<span class="error">${esc(e.message)}</span>`; });
});
let searchTimer = null;
$("brief-search").addEventListener("input", (ev) => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => { state.search = ev.target.value; refresh(); }, 200);
});
window.addEventListener("hashchange", route);

let busy = false;
function connect() {
  const source = new EventSource("/api/events");
  source.addEventListener("tick", async (ev) => {
    const { version } = JSON.parse(ev.data);
    $("live").textContent = `live, update ${version}`;
    document.body.dataset.version = String(version);
    if (busy) return;
    busy = true;
    try { await refresh(); } finally { busy = false; }
  });
  source.onerror = () => { $("live").textContent = "reconnecting…"; };
}
route();
connect();
