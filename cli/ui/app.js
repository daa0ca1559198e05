/* app.js - the cairn console: a page per hash route (#/runs, #/run/ID,
 * #/workflows, #/fleet), drawn from the JSON API under /api/. Builds every element with
 * the DOM (never innerHTML), so no value from the database becomes markup,
 * and draws its charts as SVG. Actions are POSTs with X-Cairn-Console: 1. */
"use strict";

const STATUSES = ["pending", "running", "sleeping", "waiting", "completed", "failed", "cancelled"];
const OWNER_COLOURS = ["#2f6fdf", "#1f9d55", "#d08a11", "#7c5cd6", "#d64545", "#138a9e", "#b3407d",
  "#5b8c2a", "#8a5a2b", "#3c4fa8"];
const SVGNS = "http://www.w3.org/2000/svg";

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "onclick" || k === "onsubmit" || k === "onchange") e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of kids.flat()) if (c !== null && c !== undefined && c !== false)
    e.append(c instanceof Node ? c : String(c));
  return e;
}
function s(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of kids) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

async function api(path, opts) {
  const r = await fetch(path, Object.assign({credentials: "same-origin"}, opts || {}));
  const body = await r.json().catch(() => ({error: "the server sent no JSON (" + r.status + ")"}));
  if (!r.ok) { const e = new Error(body.error || r.statusText); e.body = body; e.status = r.status; throw e; }
  return body;
}
function post(path, body) {
  return api(path, {method: "POST", headers: {"X-Cairn-Console": "1", "Content-Type": "application/json"},
    body: body === undefined ? "" : body});
}

const fmtTime = ms => ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "-";
function fmtDur(ms) {
  if (ms === null || ms === undefined || ms < 0) return "-";
  if (ms < 1000) return Math.round(ms) + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
  if (ms < 3600000) return Math.floor(ms / 60000) + "m " + Math.round((ms % 60000) / 1000) + "s";
  return Math.floor(ms / 3600000) + "h " + Math.round((ms % 3600000) / 60000) + "m";
}
const badge = st => h("span", {class: "badge s-" + st}, st);
const json = v => JSON.stringify(v, null, 2);
/* A field that did not open (null, named in "unreadable"): why, in words. */
const unreadable = (obj, field) => obj.unreadable && obj.unreadable[field] ?
  h("div", {class: "locked", title: obj.unreadable[field].cause}, "unreadable: " + obj.unreadable[field].reason) : null;
function value(obj, field, label) {
  if (unreadable(obj, field)) return unreadable(obj, field);
  if (obj[field] === null || obj[field] === undefined) return h("span", {class: "muted"}, "null");
  return h("pre", {class: label === "error" ? "err" : ""}, typeof obj[field] === "string" && label === "error" ? obj[field] : json(obj[field]));
}

/* A confirmation in the page (not window.confirm): resolves true on Confirm. */
function confirmBox(text, extra) {
  return new Promise(resolve => {
    const m = document.getElementById("modal");
    document.getElementById("modal-text").textContent = text;
    const x = document.getElementById("modal-extra");
    x.replaceChildren(...(extra ? [extra] : []));
    m.hidden = false;
    const done = v => { m.hidden = true; ok.onclick = back.onclick = null; resolve(v); };
    const ok = document.getElementById("modal-ok"), back = document.getElementById("modal-cancel");
    ok.onclick = () => done(true); back.onclick = () => done(false);
  });
}

const main = () => document.getElementById("main");
function show(...kids) { main().replaceChildren(...kids.filter(k => k)); }
function notice(text, error) { return h("div", {class: "notice" + (error ? " error" : ""), id: error ? "error" : "notice"}, text); }
let timer = null;
function every(ms, fn) { clearInterval(timer); timer = setInterval(fn, ms); }

/* ------------------------------------------------------------------ runs */

function parseQuery(q) { const o = {}; for (const [k, v] of new URLSearchParams(q)) if (v) o[k] = v; return o; }
function filterQuery(f, extra) {
  const p = new URLSearchParams();
  for (const k of ["workflow", "status", "key", "from", "to"]) if (f[k]) p.set(k, f[k]);
  for (const [k, v] of Object.entries(extra || {})) if (v !== undefined && v !== null) p.set(k, v);
  return p.toString();
}
const toIso = local => local ? new Date(local).toISOString() : "";
const toLocal = iso => { if (!iso) return ""; const d = new Date(iso); return new Date(d - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16); };

async function pageRuns(q) {
  const f = parseQuery(q);
  const input = (name, ph) => h("label", {}, name, h("input", {id: "f-" + name, value: f[name] || "", placeholder: ph}));
  const time = name => h("label", {}, name === "from" ? "created from" : "created before",
    h("input", {id: "f-" + name, type: "datetime-local", value: toLocal(f[name])}));
  const status = h("select", {id: "f-status"}, h("option", {value: ""}, "any"),
    STATUSES.map(st => h("option", {value: st, selected: f.status === st}, st)));
  const apply = ev => {
    ev.preventDefault();
    const n = {workflow: val("f-workflow"), key: val("f-key"), status: val("f-status"),
      from: toIso(val("f-from")), to: toIso(val("f-to"))};
    location.hash = "#/runs?" + filterQuery(n);
  };
  const form = h("form", {class: "filters card", onsubmit: apply}, input("workflow", "any workflow"),
    h("label", {}, "status", status), input("key", "exact key"), time("from"), time("to"),
    h("button", {class: "primary", type: "submit", id: "apply"}, "Filter"),
    h("a", {href: "#/runs", class: "clear"}, "clear"),
    h("span", {class: "bulk"},
      h("button", {type: "button", id: "bulk-retry", onclick: () => bulk(f, "retry")}, "Retry all…"),
      h("button", {type: "button", class: "danger", id: "bulk-cancel", onclick: () => bulk(f, "cancel")}, "Cancel all…")));
  const counts = h("div", {class: "counts", id: "counts"});
  const charts = h("div", {class: "row", id: "charts"});
  const table = h("div", {class: "card", id: "runs"}, h("span", {class: "muted"}, "loading…"));
  show(counts, form, table, charts);
  const draw = async () => {
    await Promise.all([drawCounts(counts, f), drawRuns(table, f, f.before), drawCharts(charts)]);
    document.body.dataset.ready = "runs";
  };
  await draw();
  every(5000, () => { if (!f.before) drawCounts(counts, f).catch(() => {}); drawCharts(charts).catch(() => {}); });
}
const val = id => document.getElementById(id).value.trim();

async function drawCounts(el, f) {
  const c = await api("/api/runs/counts?" + filterQuery(f));
  el.replaceChildren(...STATUSES.map(st => h("div", {class: "count c-" + st + (f.status === st ? " selected" : ""),
    id: "count-" + st, onclick: () => { location.hash = "#/runs?" + filterQuery(Object.assign({}, f, {status: f.status === st ? "" : st})); }},
    h("span", {class: "muted"}, st), h("b", {}, c.counts[st].toLocaleString("en-US")))));
  el.dataset.counts = JSON.stringify(c.counts);
  return c;
}

async function drawRuns(el, f, before) {
  let r;
  try { r = await api("/api/runs?" + filterQuery(f, {before, limit: 50})); }
  catch (e) { el.replaceChildren(notice(e.message, true)); return; }
  const rows = r.runs.map(x => h("tr", {class: "run", "data-id": x.id, onclick: () => { location.hash = "#/run/" + x.id; }},
    h("td", {class: "mono"}, h("a", {href: "#/run/" + x.id}, x.id)), h("td", {}, x.workflow),
    h("td", {class: "mono"}, x.key), h("td", {}, badge(x.status)),
    h("td", {class: "mono"}, x.attempt + "/" + x.max_attempts), h("td", {class: "mono"}, fmtTime(x.created_at)),
    h("td", {class: "mono"}, x.finished_at ? fmtDur(x.finished_at - (x.started_at || x.created_at)) : x.started_at ? "running " + fmtDur(Date.now() - x.started_at) : "-")));
  const next = r.next_before ? h("a", {href: "#/runs?" + filterQuery(f, {before: r.next_before}), id: "next"}, "older →") : null;
  el.replaceChildren(
    h("table", {}, h("thead", {}, h("tr", {}, ["id", "workflow", "key", "status", "attempt", "created (UTC)", "duration"].map(t => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", {colspan: 7, class: "muted"}, "no runs match")))),
    h("div", {class: "pager"}, before ? h("a", {href: "#/runs?" + filterQuery(f)}, "← newest") : null, next,
      h("span", {class: "muted", style: "margin-left:auto", id: "server-ms"}, "server " + r.server_ms.toFixed(1) + " ms")));
}

async function bulk(f, action) {
  const c = await api("/api/runs/counts?" + filterQuery(f));
  const applies = action === "cancel" ? ["pending", "running", "sleeping", "waiting"] : ["failed", "cancelled"];
  const n = applies.filter(st => !f.status || f.status === st).reduce((a, st) => a + c.counts[st], 0);
  const what = action === "cancel" ? "unfinished" : "failed or cancelled";
  if (!await confirmBox(action[0].toUpperCase() + action.slice(1) + " " + n + " " + what + " run" + (n === 1 ? "" : "s") + " that this filter selects?")) return;
  try {
    const r = await post("/api/runs/bulk?" + filterQuery(f, {action, expect: n}));
    flash(action + ": " + r.touched + " run(s) touched" + (r.skipped ? ", " + r.skipped + " skipped (they changed meanwhile)" : ""));
  } catch (e) { flash(e.message, true); }
  route();
}
function flash(text, error) { const m = main(); m.prepend(notice(text, error)); }

/* ------------------------------------------------------------- charts */

async function drawCharts(el) {
  const st = await api("/api/stats");
  depthSamples.push({at: Date.now(), v: st.queue_depth});
  if (depthSamples.length > 120) depthSamples.shift();
  el.replaceChildren(
    h("div", {class: "card"}, h("h3", {}, "Runs finished per minute (last hour)"), throughput(st.minutes),
      h("div", {class: "legend"}, h("span", {}, h("i", {style: "background:var(--completed)"}), "completed"),
        h("span", {}, h("i", {style: "background:var(--failed)"}), "failed"))),
    h("div", {class: "card"}, h("h3", {}, "Wait from due to start (runs finished in the last hour)"), latency(st.latency_ms)),
    h("div", {class: "card"}, h("h3", {}, "Queue depth (pending runs, sampled by this page)"), depth(depthSamples)));
}
const depthSamples = [];
const W = 420, H = 140, PAD = 28;

function axis(svg, max, label) {
  svg.append(s("line", {x1: PAD, y1: H - PAD, x2: W - 6, y2: H - PAD, stroke: "#c9d0da"}));
  svg.append(s("text", {x: 2, y: 12}, label + " " + max.toLocaleString("en-US")));
  svg.append(s("text", {x: 2, y: H - PAD + 4}, "0"));
}
function throughput(minutes) {
  const svg = s("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", id: "chart-throughput"});
  const max = Math.max(1, ...minutes.map(m => m.completed + m.failed));
  const bw = (W - PAD - 8) / minutes.length, sc = (H - PAD - 18) / max;
  minutes.forEach((m, i) => {
    const x = PAD + i * bw + 1, hc = m.completed * sc, hf = m.failed * sc;
    if (hc) svg.append(s("rect", {x, y: H - PAD - hc, width: Math.max(1, bw - 2), height: hc, fill: "#1f9d55"},
      s("title", {}, fmtTime(m.at) + ": " + m.completed + " completed")));
    if (hf) svg.append(s("rect", {x, y: H - PAD - hc - hf, width: Math.max(1, bw - 2), height: hf, fill: "#d64545"},
      s("title", {}, fmtTime(m.at) + ": " + m.failed + " failed")));
  });
  axis(svg, max, "max");
  svg.append(s("text", {x: PAD, y: H - 8}, "-60 min"));
  svg.append(s("text", {x: W - 40, y: H - 8}, "now"));
  return svg;
}
function latency(l) {
  const svg = s("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", id: "chart-latency"});
  const items = [["p50", l.p50], ["p90", l.p90], ["p99", l.p99]];
  const max = Math.max(1, ...items.map(i => i[1]));
  items.forEach(([name, v], i) => {
    const y = 20 + i * 34, w = (W - 120) * v / max;
    svg.append(s("text", {x: 4, y: y + 14}, name));
    svg.append(s("rect", {x: 40, y, width: Math.max(2, w), height: 20, rx: 3, fill: ["#2f6fdf", "#7c5cd6", "#d08a11"][i]}));
    svg.append(s("text", {x: 46 + Math.max(2, w), y: y + 14}, fmtDur(v)));
  });
  svg.append(s("text", {x: 4, y: H - 6}, l.samples.toLocaleString("en-US") + " runs"));
  return svg;
}
function depth(samples) {
  const svg = s("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", id: "chart-depth"});
  const max = Math.max(1, ...samples.map(p => p.v));
  const x = i => PAD + (W - PAD - 8) * (samples.length < 2 ? 1 : i / (samples.length - 1));
  const y = v => H - PAD - (H - PAD - 18) * v / max;
  const pts = samples.map((p, i) => x(i).toFixed(1) + "," + y(p.v).toFixed(1)).join(" ");
  svg.append(s("polyline", {points: pts, fill: "none", stroke: "#2f6fdf", "stroke-width": 2}));
  samples.forEach((p, i) => svg.append(s("circle", {cx: x(i), cy: y(p.v), r: 2.5, fill: "#2f6fdf"})));
  axis(svg, max, "max");
  const last = samples[samples.length - 1];
  svg.append(s("text", {x: W - 120, y: 12}, "now: " + (last ? last.v.toLocaleString("en-US") : 0)));
  return svg;
}

/* --------------------------------------------------------------- a run */

async function pageRun(id) {
  let r;
  try { r = await api("/api/run?id=" + encodeURIComponent(id)); }
  catch (e) { show(notice(e.message, true)); document.body.dataset.ready = "run"; return; }
  const finished = ["completed", "failed", "cancelled"].includes(r.status);
  const act = (name, label, cls, enabled) => h("button", {id: "action-" + name, class: cls, disabled: !enabled, onclick: async () => {
    if (!await confirmBox(label + " run " + r.id + " (" + r.workflow + "/" + r.key + ")?")) return;
    try { await post("/api/run/" + name + "?id=" + r.id); flash(name + " requested"); } catch (e) { flash(e.message, true); }
    setTimeout(route, 300);
  }}, label);
  const sigName = h("input", {id: "signal-name", placeholder: "signal name"});
  const sigBody = h("textarea", {id: "signal-payload", placeholder: "JSON payload (empty: null)"});
  const sendSignal = async () => {
    const extra = h("div", {}, h("label", {}, "name", sigName), h("label", {}, "payload", sigBody));
    if (!await confirmBox("Send a signal to run " + r.id + ":", extra)) return;
    try { await post("/api/run/signal?id=" + r.id + "&name=" + encodeURIComponent(sigName.value.trim()), sigBody.value); flash("signal sent"); }
    catch (e) { flash(e.message, true); }
    route();
  };
  const head = h("div", {class: "card"},
    h("div", {style: "display:flex;align-items:center;gap:12px"},
      h("h2", {style: "margin:0"}, "Run ", h("span", {class: "mono", id: "run-id"}, r.id)), h("span", {id: "run-status"}, badge(r.status)),
      r.cancel_requested && !finished ? h("span", {class: "muted"}, "cancel requested") : null,
      h("div", {class: "actions", style: "margin-left:auto"}, act("cancel", "Cancel", "danger", !finished),
        act("retry", "Retry", "", ["failed", "cancelled"].includes(r.status)),
        h("button", {id: "action-signal", disabled: finished, onclick: sendSignal}, "Send signal…"))),
    h("dl", {class: "kv", style: "margin-top:12px"},
      kv("workflow", r.workflow), kv("key", h("span", {class: "mono"}, r.key)),
      kv("shard", h("span", {class: "mono"}, r.group + "/" + r.shard)), kv("attempt", r.attempt + " of " + r.max_attempts),
      r.parent_id ? kv("parent", h("a", {href: "#/run/" + r.parent_id, class: "mono"}, r.parent_id)) : null,
      r.continued_from ? kv("previous", h("a", {href: "#/run/" + r.continued_from, class: "mono", id: "run-previous"}, r.continued_from)) : null,
      r.continued_to ? kv("next", h("span", {}, h("a", {href: "#/run/" + r.continued_to, class: "mono", id: "run-next"}, r.continued_to),
        h("span", {class: "muted"}, " (continued as new)"))) : null,
      r.code_version ? kv("code version", h("span", {class: "mono"}, r.code_version)) : null,
      r.concurrency_key ? kv("concurrency key", h("span", {class: "mono"}, r.concurrency_key)) : null,
      r.priority ? kv("priority", String(r.priority)) : null,
      r.waiting_for ? kv("waiting for", h("span", {id: "run-waiting"}, r.waiting_for)) : null,
      kv("runtime", h("span", {id: "run-runtime"}, r.runtime || "no worker has served it")),
      r.unserved ? kv("waiting", h("span", {id: "run-unserved", class: "err"}, r.unserved)) : null,
      kv("created", h("span", {class: "mono"}, fmtTime(r.created_at))), kv("started", h("span", {class: "mono"}, fmtTime(r.started_at))),
      kv("finished", h("span", {class: "mono"}, fmtTime(r.finished_at))),
      kv("duration", r.started_at ? fmtDur((r.finished_at || Date.now()) - r.started_at) : "-")));
  const failed = r.error !== null || unreadable(r, "error");
  const io = h("div", {class: "row", id: "run-io"}, h("div", {class: "card"}, h("h3", {}, "Input"), value(r, "input")),
    h("div", {class: "card"}, h("h3", {}, failed ? "Error" : "Output"),
      failed ? value(r, "error", "error") : value(r, "output")));
  show(head, io, timeline(r), h("div", {class: "row"}, signals(r), children(r), events(r)));
  document.body.dataset.ready = "run";
  if (!finished) every(3000, () => { if (document.getElementById("modal").hidden) route(); });
}
const kv = (k, v) => [h("dt", {}, k), h("dd", {}, v)];

function timeline(r) {
  const steps = r.steps;
  const t0 = r.started_at || r.created_at;
  const t1 = Math.max(r.finished_at || Date.now(), ...steps.map(x => x.finished_at || Date.now()));
  const span = Math.max(1, t1 - t0);
  const colour = st => `var(--${st === "retrying" ? "waiting" : st === "timed_out" ? "failed" : st === "waiting" ? "sleeping" : st})`;
  const items = steps.map(x => {
    const end = x.finished_at || Date.now();
    const left = Math.max(0, (x.started_at - t0) / span * 100), width = Math.max(0.4, (end - x.started_at) / span * 100);
    return h("li", {class: "step", "data-seq": x.seq},
      h("span", {class: "mono muted"}, "#" + x.seq),
      h("span", {}, h("b", {class: "step-name"}, x.name), " ", h("span", {class: "muted"}, x.kind)),
      h("div", {class: "bar-wrap"}, h("div", {class: "bar", style: `left:${left}%;width:${Math.min(width, 100 - left)}%;background:${colour(x.status)}`,
        title: fmtTime(x.started_at) + " → " + fmtTime(x.finished_at)})),
      h("span", {class: "mono"}, badge(x.status), " ", fmtDur(x.finished_at ? x.finished_at - x.started_at : null), x.attempts > 1 ? " ×" + x.attempts : ""),
      h("div", {class: "detail"}, x.error ? h("pre", {class: "err"}, x.error) :
        unreadable(x, "error") || unreadable(x, "output") ||
        (x.output !== null ? h("code", {class: "result", title: json(x.output)}, "→ " + JSON.stringify(x.output)) : null)));
  });
  return h("div", {class: "card"}, h("h3", {}, "Journal (" + steps.length + " step" + (steps.length === 1 ? "" : "s") + ", " + fmtDur(span) + ")"),
    steps.length ? h("ol", {class: "timeline", id: "timeline"}, items) : h("p", {class: "muted"}, "no steps journaled yet"));
}
function signals(r) {
  return h("div", {class: "card", id: "signals"}, h("h3", {}, "Signals"), r.signals.length ? h("table", {},
    h("tr", {}, h("th", {}, "name"), h("th", {}, "sent"), h("th", {}, "state"), h("th", {}, "payload")),
    r.signals.map(g => h("tr", {}, h("td", {class: "mono"}, g.name), h("td", {class: "mono"}, fmtTime(g.created_at)),
      h("td", {}, g.consumed_by_seq === null ? badge("waiting") : "taken by #" + g.consumed_by_seq),
      h("td", {}, unreadable(g, "payload") || h("code", {}, JSON.stringify(g.payload)))))) :
    h("p", {class: "muted"}, "none received"));
}
function children(r) {
  return h("div", {class: "card", id: "children"}, h("h3", {}, "Children"), r.children.length ? h("table", {},
    r.children.map(k => h("tr", {}, h("td", {class: "mono"}, h("a", {href: "#/run/" + k.id}, k.id)), h("td", {}, k.workflow), h("td", {}, badge(k.status))))) :
    h("p", {class: "muted"}, "no child runs"));
}
function events(r) {
  return h("div", {class: "card", id: "events"}, h("h3", {}, "Events"), r.events.length ? h("table", {},
    r.events.map(e => h("tr", {}, h("td", {class: "mono"}, e.key),
      h("td", {}, unreadable(e, "value") || h("code", {}, JSON.stringify(e.value))),
      h("td", {class: "mono muted"}, fmtTime(e.updated_at))))) :
    h("p", {class: "muted"}, "none published"));
}

/* ------------------------------------------------------------- the fleet */

async function pageFleet() {
  const f = await api("/api/fleet");
  const colourOf = {};
  f.runners.forEach((r, i) => { colourOf[r.id] = OWNER_COLOURS[i % OWNER_COLOURS.length]; });
  const name = id => { const r = f.runners.find(x => x.id === id); return r ? r.name : id ? "runner " + id : "nobody"; };
  const runners = h("div", {class: "card", id: "runners"}, h("h3", {}, "Runners"), f.runners.length ? h("table", {},
    h("tr", {}, ["", "id", "name", "address", "version", "live", "health", "heartbeat", "shards", "weight", "runtimes"].map(t => h("th", {}, t))),
    f.runners.map(r => h("tr", {}, h("td", {}, h("i", {class: "dot", style: "background:" + colourOf[r.id]})),
      h("td", {class: "mono"}, r.id), h("td", {}, r.name), h("td", {class: "mono"}, r.address), h("td", {class: "mono"}, r.version),
      h("td", {}, h("span", {class: "dot " + (r.live ? "ok" : "bad")}), r.live ? "live" : "gone"),
      h("td", {}, h("span", {class: "dot " + (r.healthy ? "ok" : "warn")}), r.healthy ? "healthy" : "unhealthy"),
      h("td", {class: "mono"}, fmtDur(r.heartbeat_age_ms) + " ago"), h("td", {class: "mono"}, r.shards), h("td", {class: "mono"}, r.weight),
      h("td", {}, r.runtimes || "-"))))
    : h("p", {class: "muted"}, "no runner has registered"));
  const grids = Object.entries(f.shards).map(([g, rows]) => h("div", {class: "card"},
    h("h3", {}, "Shards of group " + g + " (" + rows.length + " leased)"),
    h("div", {class: "grid", id: "grid-" + g}, rows.map(([n, owner, epoch]) => h("span", {class: "cell",
      style: owner ? "background:" + (colourOf[owner] || "#99a") : "", title: "shard " + n + ": " + name(owner) + ", epoch " + epoch}))),
    h("div", {class: "legend"}, f.runners.map(r => h("span", {}, h("i", {style: "background:" + colourOf[r.id]}), r.name)),
      h("span", {}, h("i", {style: "background:#dfe3e8"}), "no owner"))));
  /* Acquisitions of one rebalance (same owner, same second) make one row. */
  const groups = [];
  for (const m of f.moves) {
    const last = groups[groups.length - 1];
    if (last && last.owner === m.owner && last.group === m.group && Math.floor(last.at / 1000) === Math.floor(m.acquired_at / 1000))
      last.shards.push(m.shard);
    else groups.push({owner: m.owner, group: m.group, at: m.acquired_at, shards: [m.shard]});
  }
  const moves = h("div", {class: "card"}, h("h3", {}, "Recent shard acquisitions"), groups.length ? h("table", {},
    h("tr", {}, ["when", "to", "shards"].map(t => h("th", {}, t))),
    groups.map(g => h("tr", {}, h("td", {class: "mono"}, fmtTime(g.at)),
      h("td", {}, h("i", {class: "dot", style: "background:" + (colourOf[g.owner] || "#99a")}), name(g.owner)),
      h("td", {class: "mono wrap"}, g.group + "/" + g.shards.sort((a, b) => a - b).join(", "))))) : h("p", {class: "muted"}, "none"));
  const singletons = h("div", {class: "card"}, h("h3", {}, "Singletons"), h("table", {},
    h("tr", {}, ["name", "shard", "runs on"].map(t => h("th", {}, t))),
    f.singletons.map(x => h("tr", {}, h("td", {class: "mono"}, x.name), h("td", {class: "mono"}, "default/" + x.shard),
      h("td", {}, x.owner ? name(x.owner) : h("span", {class: "muted"}, "not running"))))));
  const schedules = f.schedules.length ? h("div", {class: "card"}, h("h3", {}, "Schedules"), h("table", {},
    h("tr", {}, ["name", "cron", "workflow", "next", "last run", "fires"].map(t => h("th", {}, t))),
    f.schedules.map(x => h("tr", {}, h("td", {class: "mono"}, x.name), h("td", {class: "mono"}, x.cron + " " + x.tz),
      h("td", {}, x.workflow), h("td", {class: "mono"}, x.paused ? "paused" : fmtTime(x.next_at)),
      h("td", {class: "mono"}, x.last_run_id ? h("a", {href: "#/run/" + x.last_run_id}, x.last_run_id) : "-"), h("td", {class: "mono"}, x.fires))))) : null;
  show(runners, ...grids, h("div", {class: "row"}, moves, singletons), schedules);
  document.body.dataset.ready = "fleet";
  every(5000, () => route());
}

/* ----------------------------------------------------------- workflows */

/* Each workflow by group: its runtime, the live runners that serve it (of
 * the group's), when it was last seen and its waiting runs; a row no live
 * worker serves is marked, since its runs wait. */
async function pageWorkflows() {
  const w = (await api("/api/workflows")).workflows;
  const rows = w.map(x => h("tr", {class: "workflow" + (x.runners.length ? "" : " unserved"), "data-workflow": x.workflow, "data-group": x.group},
    h("td", {}, h("a", {href: "#/runs?" + new URLSearchParams({workflow: x.workflow})}, x.workflow)),
    h("td", {class: "mono"}, x.group), h("td", {}, x.runtime || h("span", {class: "muted"}, "-")),
    h("td", {class: "serving"}, h("span", {class: "dot " + (x.runners.length ? "ok" : "bad")}),
      x.runners.length + " of " + x.group_live_runners),
    h("td", {class: "mono"}, x.served ? fmtDur(x.last_seen_age_ms) + " ago" : "never"),
    h("td", {class: "mono waiting"}, x.waiting),
    h("td", {}, x.runners.length ? x.runners.map(r => h("div", {class: "mono"}, r.id + " " + r.name + " (" + r.runtime + ")")) :
      h("span", {class: "err"}, x.served ? "no live worker serves it" : "never served"))));
  show(h("div", {class: "card", id: "workflows"}, h("h3", {}, "Workflows"), w.length ? h("table", {},
    h("tr", {}, ["workflow", "group", "runtime", "serving", "last seen", "waiting", "runners"].map(t => h("th", {}, t))), rows) :
    h("p", {class: "muted"}, "no worker has registered a workflow")));
  document.body.dataset.ready = "workflows";
  every(5000, () => route());
}

/* --------------------------------------------------------------- router */

async function route() {
  const hash = location.hash || "#/runs";
  const [path, q] = hash.slice(1).split("?");
  document.getElementById("nav-runs").className = path.startsWith("/run") ? "active" : "";
  document.getElementById("nav-fleet").className = path === "/fleet" ? "active" : "";
  document.getElementById("nav-workflows").className = path === "/workflows" ? "active" : "";
  clearInterval(timer);
  try {
    if (path.startsWith("/run/")) await pageRun(path.slice(5));
    else if (path === "/fleet") await pageFleet();
    else if (path === "/workflows") await pageWorkflows();
    else await pageRuns(q || "");
  } catch (e) { show(notice(e.message, true)); }
}
window.addEventListener("hashchange", () => { delete document.body.dataset.ready; route(); });
document.addEventListener("DOMContentLoaded", () => {
  route();
  const tick = () => { document.getElementById("clock").textContent = new Date().toISOString().slice(0, 19).replace("T", " ") + " UTC"; };
  tick();
  setInterval(tick, 1000);
});
