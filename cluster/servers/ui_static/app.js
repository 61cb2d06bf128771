// omray memory viewer: plain JS, no dependencies. Every text from memory goes into the page as
// textContent (never as HTML). Views: #/ sessions, #/session/P/S, #/search, #/recall/P/S/ID, #/cost.
"use strict";

const COLORS = ["#2f5bd3", "#d3772f", "#1e7a3c", "#9b2fd3", "#b3261e", "#2fa6d3"];
const SVG_NS = "http://www.w3.org/2000/svg";
let state = { projects: [], search: { query: "", mode: "exact", project: "", session: "" }, lastSearch: null };

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}

async function api(path, body) {
  const options = body === undefined ? {} : {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  };
  options.credentials = "same-origin";
  const response = await fetch(path, options);
  let data = null;
  try { data = await response.json(); } catch (e) { data = { ok: false, error: "bad_answer", message: String(response.status) }; }
  if (!response.ok && data && data.ok === undefined) data.ok = false;
  return data;
}

function fmt(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
function when(t) { return t ? String(t).replace("T", " ").replace(/(\.\d+)?(\+00:00|Z)$/, "") : "–"; }
function enc(s) { return encodeURIComponent(s); }
function toast(text) {
  const el = document.getElementById("toast");
  el.textContent = text; el.hidden = false;
  clearTimeout(toast.timer); toast.timer = setTimeout(() => { el.hidden = true; }, 2500);
}

async function copyId(id) {
  try { await navigator.clipboard.writeText(id); toast("copied " + id.slice(0, 12)); }
  catch (e) { window.prompt("Copy this id", id); }
}
function copyButton(id) {
  return h("button", { class: "small copy-id", title: "copy id", "data-id": id, onclick: () => copyId(id) }, "copy id");
}
function errorBox(answer) {
  return h("div", { class: "card failure" }, `${answer.error || "error"}: ${answer.message || ""}`);
}
function setView(...children) {
  const view = document.getElementById("view");
  view.replaceChildren(...children.flat(Infinity).filter(c => c !== null && c !== undefined && c !== false));
}

// ------------------------------------------------------------------------------------ queue (live)

async function pollQueue() {
  const el = document.getElementById("queue");
  try {
    const q = await api("/api/queue");
    if (!q.available) { el.textContent = "queue: not connected (read-only)"; }
    else {
      const f = q.figures || {};
      const pools = Object.entries(q.pools || {}).map(([handler, p]) =>
        `${handler.split(".").pop()} ${p.busy_workers}/${p.workers} busy, ${p.waiting} waiting`).join(" · ");
      el.textContent = `queue depth ${fmt(f.depth)} · in flight ${fmt(f.in_flight)}/${fmt(f.slots)}` +
        ` · lanes ${fmt(f.busy_lanes)}/${fmt(f.lanes)} busy\n${pools}`;
      el.dataset.depth = String(f.depth);
    }
  } catch (e) { el.textContent = "queue: viewer unreachable"; }
  // The sessions list (jobs, failures, coverage) follows the runtime too, every 5 s.
  pollQueue.ticks = (pollQueue.ticks || 0) + 1;
  if (pollQueue.ticks % 5 === 0 && document.body.dataset.view === "sessions") showSessions().catch(() => {});
  setTimeout(pollQueue, 1000);
}

// ---------------------------------------------------------------------------------------- sessions

function failureCell(session) {
  const items = session.failures.map(f => h("div", { class: "failure" },
    h("b", {}, f.reason), " — ", f.cause || "", h("br"), h("span", { class: "muted" }, "fix: ", f.fix || "")));
  if (session.jobs && session.jobs.last_reason) items.push(h("div", { class: "muted" }, "retrying: " + session.jobs.last_reason));
  return items.length ? items : h("span", { class: "muted" }, "none");
}

function jobsCell(session) {
  if (!session.jobs) return h("span", { class: "muted" }, "unknown");
  const j = session.jobs;
  if (!j.pending && !j.running) return h("span", { class: "muted" }, "idle");
  return `${j.running} running, ${j.pending} queued`;
}

async function showSessions() {
  const data = await api("/api/projects");
  if (!data.projects) { setView(errorBox(data)); return; }
  state.projects = data.projects;
  const blocks = data.projects.map(project => h("section", { class: "project", "data-project": project.name },
    h("h2", {}, project.name, " ", h("span", { class: "muted" }, project.database)),
    project.sessions.length === 0 ? h("p", { class: "muted" }, "No memory yet.") :
    h("table", { class: "sessions" },
      h("thead", {}, h("tr", {}, h("th", {}, "Session"), h("th", {}, "Last activity"), h("th", { class: "num" }, "Coverage"),
        h("th", { class: "num" }, "Observations"), h("th", { class: "num" }, "Reflections"),
        h("th", { class: "num" }, "Memory tokens"), h("th", {}, "Jobs"), h("th", {}, "Failures"))),
      h("tbody", {}, project.sessions.map(s => h("tr", { class: "session-row", "data-session": s.session_id },
        h("td", {}, h("a", { class: "session-link", href: `#/session/${enc(project.name)}/${enc(s.session_id)}` }, s.session_id)),
        h("td", {}, when(s.last_activity)),
        h("td", { class: "num" }, s.coverage_end === null ? "none" : `1–${fmt(s.coverage_end)}`),
        h("td", { class: "num" }, fmt(s.observations)),
        h("td", { class: "num" }, fmt(s.reflections)),
        h("td", { class: "num" }, fmt(s.memory_tokens)),
        h("td", {}, jobsCell(s)),
        h("td", {}, failureCell(s)))))),
  ));
  setView(h("h1", {}, "Projects and sessions"), data.runtime ? null :
    h("p", { class: "muted" }, "No runtime connected: read-only; re-observe and forget are off."), blocks);
}

// ----------------------------------------------------------------------------------------- session

function observationItem(project, session, o, canForget) {
  const status = o.active ? h("span", { class: "badge active" }, "active") :
    h("span", { class: "badge retired" }, o.retired_by ? `retired by ${o.retired_by.slice(0, 12)}` : "inactive");
  return h("div", { class: "observation" + (o.active ? "" : " retired"), "data-id": o.id },
    h("div", { class: "row" }, h("code", { class: "id" }, o.display_id), h("span", { class: "muted" }, o.timestamp),
      h("span", { class: `badge ${o.importance}` }, o.importance), status,
      h("span", { class: "muted" }, "events ", o.source_seqs.join(", ") || "–"),
      copyButton(o.id),
      h("a", { class: "recall-link", href: `#/recall/${enc(project)}/${enc(session)}/${enc(o.id)}` }, "recall"),
      canForget ? forgetButton(project, session, o.id) : null),
    h("div", { class: "content" }, o.content));
}

function forgetButton(project, session, id) {
  return h("button", { class: "small forget-button", "data-id": id, onclick: (event) => confirmForget(event.target, project, session, id) }, "forget");
}

function confirmForget(anchor, project, session, id) {
  const what = id ? `memory ${id.slice(0, 12)}… of session ${session}` : `everything omray remembers of session ${session}`;
  const box = h("div", { class: "confirm", id: "forget-confirm" },
    h("p", {}, `Forget ${what}? Search and the compaction text will never show it again.`),
    h("div", { class: "row" },
      h("button", { class: "danger", id: "confirm-forget", onclick: async () => {
        const request = id ? { project, session_id: session, ids: [id] } : { project, session_id: session, whole_session: true };
        const answer = await api("/api/forget", request);
        if (answer.ok) { toast("forgotten"); route(); } else { box.replaceWith(errorBox(answer)); }
      } }, "Forget"),
      h("button", { onclick: () => box.remove() }, "Cancel")));
  document.getElementById("forget-confirm")?.remove();
  anchor.closest(".observation, .result, .session-actions")?.after(box);
}

function reobserveBox(project, s) {
  const input = h("input", { class: "seq", id: "observe-seq", type: "number", min: 1, value: s.last_seq || 1 });
  const canForget = (state.projects.find(p => p.name === project) || {}).forget;
  const box = h("div", { class: "row session-actions" }, "Observe through seq ", input,
    h("button", { id: "observe-button", disabled: !s.actions, title: s.actions ? "" : "no runtime", onclick: async () => {
      const endSeq = Number(input.value);
      if (!window.confirm(`Send an observe job for ${s.session_id} through seq ${endSeq}? It runs with the settings in effect now.`)) return;
      const answer = await api("/api/observe", { project, session_id: s.session_id, end_seq: endSeq });
      toast(answer.ok ? `observe job ${answer.job_id.slice(0, 12)} queued` : `${answer.error}: ${answer.message}`);
    } }, "Re-observe"),
    canForget ? h("button", { class: "danger", id: "forget-session", onclick: (event) => confirmForget(event.target, project, s.session_id, null) }, "Forget session") : null);
  return box;
}

async function showSession(project, session) {
  const s = await api(`/api/session?project=${enc(project)}&session=${enc(session)}`);
  if (s.ok === false) { setView(errorBox(s)); return; }
  const canForget = (state.projects.find(p => p.name === project) || {}).forget;
  const generations = s.generations.map(g => h("div", { class: "card generation", "data-id": g.id },
    h("div", { class: "row" }, h("b", {}, "Generation "), h("code", {}, g.display_id),
      g.active ? h("span", { class: "badge active" }, "active") : null,
      h("span", { class: "badge" }, g.status), h("span", { class: "muted" }, `${g.trigger}, watermark seq ${fmt(g.watermark)}, ${when(g.completed_at || g.created_at)}`),
      copyButton(g.id)),
    g.failure ? h("div", { class: "failure" }, g.failure) : null,
    g.reflections.map(r => h("div", { class: "observation reflection", "data-id": r.id },
      h("div", { class: "row" }, h("code", {}, r.display_id), h("span", { class: "badge" }, "reflection"),
        h("span", { class: "muted" }, `supports ${r.supporting_ids.map(i => i.slice(0, 8)).join(", ") || "none"}`),
        copyButton(r.id), h("a", { class: "recall-link", href: `#/recall/${enc(project)}/${enc(session)}/${enc(r.id)}` }, "recall")),
      h("div", {}, r.content))),
    h("div", { class: "muted" }, `kept ${g.retained} observations; retired ${g.retired.length}`,
      g.retired.length ? ": " + g.retired.map(i => i.slice(0, 8)).join(", ") : "")));
  const parts = s.parts.map(p => h("div", { class: "card part", "data-seq": p.seq_start },
    h("div", { class: "row" }, h("b", {}, `Events ${p.seq_start}–${p.seq_end}`), h("span", { class: "muted" }, `part ${p.part}, observed ${when(p.covered_at)}`),
      p.current_versions ? null : h("span", { class: "badge" }, "older versions")),
    h("ul", { class: "events" }, p.events.map(e => h("li", {}, h("span", { class: "seq" }, e.seq), h("span", { class: "muted" }, e.type, " "),
      e.excerpt + (e.truncated ? " …" : "")))),
    p.observations.length ? p.observations.map(o => observationItem(project, session, o, canForget)) :
      h("div", { class: "muted" }, "no observation written for this part (its events stay searchable)")));
  const failures = s.failures.map(f => h("div", { class: "failure" }, h("b", {}, f.last_failure), " — ", f.cause, " · fix: ", f.fix));
  setView(
    h("h1", {}, "Session ", h("code", { id: "session-id" }, session), " ", copyButton(session)),
    h("p", { class: "muted" }, `${fmt(s.counts.observations)} observations (${fmt(s.counts.active_observations)} active, ${fmt(s.counts.retired_observations)} retired),`,
      ` ${fmt(s.counts.reflections)} reflections, ${fmt(s.counts.events)} covered events; last seq ${fmt(s.last_seq)}`),
    reobserveBox(project, s), failures,
    h("div", { class: "grid2" },
      h("section", {}, h("h2", {}, "Timeline (as observed)"), parts, s.unplaced_observations.map(o => observationItem(project, session, o, canForget)),
        s.events_truncated ? h("p", { class: "muted" }, "more events than shown") : null),
      h("section", {}, h("h2", {}, "Compaction text (what the agent gets)"),
        h("pre", { id: "projection" }, s.projection || "(empty: the host compacts as usual)"),
        h("h2", {}, "Reflection generations"), generations.length ? generations : h("p", { class: "muted" }, "No generation yet."))));
}

// ------------------------------------------------------------------------------------------ search

function projectSelect(selected) {
  return h("select", { id: "search-project" }, state.projects.map(p => h("option", { value: p.name, selected: p.name === selected }, p.name)));
}

async function showSearch() {
  if (!state.projects.length) state.projects = (await api("/api/projects")).projects || [];
  const s = state.search;
  const input = h("input", { type: "search", id: "search-input", placeholder: "search memory", value: s.query });
  const mode = h("select", { id: "search-mode" }, ["exact", "hybrid"].map(m => h("option", { value: m, selected: m === s.mode }, m)));
  const project = projectSelect(s.project || (state.projects[0] || {}).name);
  const scope = h("input", { id: "search-session", placeholder: "session (optional)", value: s.session });
  const results = h("div", { id: "results" });
  const run = async () => {
    Object.assign(s, { query: input.value, mode: mode.value, project: project.value, session: scope.value.trim() });
    const body = { project: s.project, query: s.query, mode: s.mode };
    if (s.session) body.scope = [s.session];
    results.replaceChildren(h("p", { class: "muted" }, "Searching…"));
    const answer = await api("/api/search", body);
    state.lastSearch = answer;
    renderResults(results, answer, s.mode);
  };
  const form = h("form", { class: "row", onsubmit: (e) => { e.preventDefault(); run(); } },
    input, mode, project, scope, h("button", { class: "primary", id: "search-button", type: "submit" }, "Search"));
  setView(h("h1", {}, "Search"), form, results);
  if (s.query) run();
  input.focus();
}

function renderResults(target, answer, mode) {
  if (!answer.ok) { target.replaceChildren(errorBox(answer)); return; }
  const canForget = (state.projects.find(p => p.name === answer.project) || {}).forget;
  const note = answer.hybrid_unavailable ? ` (hybrid unavailable: ${answer.hybrid_unavailable}; exact results)` : "";
  target.replaceChildren(h("p", { class: "muted", id: "result-count", "data-mode": mode }, `${answer.count} result(s)${answer.truncated ? ", more not shown" : ""}${note}`),
    ...answer.results.map(r => h("div", { class: "result", "data-id": r.id, "data-kind": r.kind },
      h("div", { class: "row" }, h("span", { class: "badge" }, r.kind), h("code", {}, r.display_id || r.id.slice(0, 12)),
        h("a", { href: `#/session/${enc(answer.project)}/${enc(r.session_id)}` }, r.session_id),
        h("span", { class: "muted" }, r.timestamp || ""), r.importance ? h("span", { class: `badge ${r.importance}` }, r.importance) : null,
        copyButton(r.id),
        h("a", { class: "recall-link", href: `#/recall/${enc(answer.project)}/${enc(r.session_id)}/${enc(r.id)}` }, "recall"),
        canForget && r.kind === "observation" ? forgetButton(answer.project, r.session_id, r.id) : null),
      h("div", { class: "content" }, r.content),
      r.source ? h("div", { class: "excerpt" }, `events ${r.source.seq_start}–${r.source.seq_end}: `, r.source.excerpt || "") : null)));
}

// ------------------------------------------------------------------------------------------ recall

async function showRecall(project, session, id) {
  const answer = await api("/api/recall", { project, session_id: session, id });
  if (!answer.ok) { setView(h("h1", {}, "Recall"), errorBox(answer)); return; }
  const memory = answer.kind === "event" ? null : answer;
  const events = answer.events || [];
  setView(h("h1", {}, "Recall ", h("code", { id: "recall-id" }, id.slice(0, 16)), " ", copyButton(id)),
    h("p", {}, h("a", { href: `#/session/${enc(project)}/${enc(session)}` }, "session " + session), " · ", h("a", { href: "#/search" }, "back to search")),
    memory ? h("div", { class: "card", id: "recall-memory" }, h("b", {}, answer.kind || ""), " ", memory.content || "") : null,
    answer.covered_by && answer.covered_by.length ? h("p", { class: "muted" }, "covered by ", answer.covered_by.map(i => i.slice(0, 12)).join(", ")) : null,
    h("h2", {}, `Source events (${events.length})`),
    h("div", { id: "recall-events" }, events.map(e => h("div", { class: "card recall-event", "data-seq": e.seq },
      h("div", { class: "row" }, h("b", {}, "seq " + e.seq), h("span", { class: "muted" }, e.type || "", " ", when(e.created_at))),
      h("pre", {}, JSON.stringify(e.payload === undefined ? e : e.payload, null, 2))))));
}

// -------------------------------------------------------------------------------------------- cost

function chart(points, value, label, id) {
  // A cumulative value per model over time (tokens, or money); x = hour buckets in order.
  const buckets = [...new Set(points.map(p => p.bucket))].sort();
  const models = [...new Set(points.map(p => p.model))].sort();
  const width = 760, height = 260, left = 60, bottom = 30, top = 10, right = 10;
  const series = models.map(model => {
    let total = 0;
    return buckets.map(b => { for (const p of points) if (p.model === model && p.bucket === b) total += value(p); return total; });
  });
  const max = Math.max(label === "tokens" ? 1 : 1e-9, ...series.flat());
  const x = i => left + (buckets.length <= 1 ? (width - left - right) / 2 : i * (width - left - right) / (buckets.length - 1));
  const y = v => height - bottom - v * (height - bottom - top) / max;
  const root = svg("svg", { class: "chart", id, width, height, viewBox: `0 0 ${width} ${height}` });
  root.append(svg("line", { x1: left, y1: height - bottom, x2: width - right, y2: height - bottom, stroke: "#999" }));
  root.append(svg("line", { x1: left, y1: top, x2: left, y2: height - bottom, stroke: "#999" }));
  const topLabel = label === "tokens" ? fmt(max) : max.toFixed(4);
  root.append(svg("text", { x: 4, y: top + 10 }, topLabel), svg("text", { x: 4, y: height - bottom }, "0"),
    svg("text", { x: left + 8, y: top + 12 }, `cumulative ${label} per model`));
  if (buckets.length) {
    root.append(svg("text", { x: left, y: height - 8 }, buckets[0].replace("T", " ") + "h"));
    if (buckets.length > 1) root.append(svg("text", { x: width - right - 110, y: height - 8 }, buckets[buckets.length - 1].replace("T", " ") + "h"));
  }
  series.forEach((values, index) => {
    const color = COLORS[index % COLORS.length];
    root.append(svg("polyline", { points: values.map((v, i) => `${x(i)},${y(v)}`).join(" "), fill: "none", stroke: color, "stroke-width": 2 }));
    values.forEach((v, i) => root.append(svg("circle", { cx: x(i), cy: y(v), r: 3, fill: color })));
  });
  const legend = h("div", { class: "legend" }, models.map((m, i) => h("span", {}, h("i", { class: `swatch-${i % COLORS.length}` }), m)));
  return [root, legend];
}

function budgetBox(budget, held) {
  // The project's daily budget today (UTC), and a notice while the queue holds its model jobs.
  if (!budget) return null;
  const capLine = (spent, cap, unit, digits) => cap === null || cap === undefined
    ? `${spent.toFixed(digits)} ${unit} (no cap)`
    : `${spent.toFixed(digits)} of ${Number(cap).toFixed(digits)} ${unit} (${Math.min(999, Math.round(100 * spent / cap))}%)`;
  const parts = [
    h("div", {}, h("strong", {}, `Budget today (${budget.day}, UTC): `),
      capLine(budget.tokens, budget.daily_tokens, "tokens", 0), " · ", capLine(budget.usd, budget.daily_usd, "USD", 4)),
    h("div", { class: "muted" }, `One call is sent at most ${budget.max_prompt_tokens === null ? "any number of" : fmt(budget.max_prompt_tokens)} prompt tokens; the caps reset at ${budget.resets_at.slice(0, 16).replace("T", " ")} UTC.`),
  ];
  if (budget.unpriced_models.length && budget.daily_usd !== null) parts.push(h("div", { class: "muted" }, "Not counted in USD (no reported cost, no price): " + budget.unpriced_models.join(", ")));
  if (held.length || budget.reached) {
    const jobs = held.reduce((n, x) => n + (x.jobs || 0), 0);
    parts.push(h("div", { class: "failure" }, `Observing is paused: the daily budget (${budget.reached || held[0].reason}) is used up${jobs ? `; ${jobs} observe/reflect jobs wait in their lanes` : ""}. ` +
      "Nothing is lost; search and compaction keep working. It resumes at 00:00 UTC, or within a minute of raising observational_memory.budget in the project's settings (`omray retry`: at once)."));
  }
  return h("div", { class: "card budget" }, parts);
}

async function showCost() {
  if (!state.projects.length) state.projects = (await api("/api/projects")).projects || [];
  const sections = [];
  for (const project of state.projects) {
    const cost = await api(`/api/cost?project=${enc(project.name)}`);
    if (cost.ok === false) { sections.push(errorBox(cost)); continue; }
    const money = v => v === null ? "–" : `${v.toFixed(4)} ${cost.currency}`;
    const usd = v => v === null || v === undefined ? "–" : `${v.toFixed(4)} USD`;
    sections.push(h("section", {}, h("h2", {}, project.name),
      budgetBox(cost.budget, cost.held || []),
      h("h3", {}, "Spend per day (UTC), session and model"),
      (cost.by_day || []).length ? h("table", { class: "cost by-day" }, h("thead", {}, h("tr", {}, h("th", {}, "Day"), h("th", {}, "Session"),
        h("th", {}, "Model"), h("th", { class: "num" }, "Requests"), h("th", { class: "num" }, "Tokens"), h("th", { class: "num" }, "USD"))),
        h("tbody", {}, cost.by_day.map(d => h("tr", {}, h("td", {}, d.day), h("td", {}, d.session_id), h("td", {}, d.model),
          h("td", { class: "num" }, fmt(d.requests)), h("td", { class: "num" }, fmt(d.tokens)), h("td", { class: "num" }, usd(d.usd))))))
        : h("p", { class: "muted" }, "No model usage in the last seven days."),
      h("h3", {}, "Over time"),
      cost.points.length ? chart(cost.points, p => p.prompt_tokens + p.completion_tokens, "tokens", "tokens-chart") :
        h("p", { class: "muted" }, "No model usage recorded."),
      cost.points.length && cost.currency ? chart(cost.points, p => p.cost || 0, cost.currency, "cost-chart") : null,
      cost.currency ? null : h("p", { class: "muted" }, "No price table in the settings (prices:): tokens only."),
      cost.unpriced_models.length ? h("p", { class: "muted" }, "Unpriced: " + cost.unpriced_models.join(", ")) : null,
      h("table", { class: "cost" }, h("thead", {}, h("tr", {}, h("th", {}, "Session"), h("th", {}, "Model"), h("th", { class: "num" }, "Requests"),
        h("th", { class: "num" }, "Tokens"), h("th", { class: "num" }, "Cost"))),
        h("tbody", {}, cost.by_session_and_model.map(t => h("tr", {}, h("td", {}, t.session_id), h("td", {}, t.model),
          h("td", { class: "num" }, fmt(t.requests)), h("td", { class: "num" }, fmt(t.tokens)), h("td", { class: "num" }, money(t.cost))))))));
  }
  setView(h("h1", {}, "Cost per session and model"), sections);
}

// ------------------------------------------------------------------------------------------ router

async function route() {
  const parts = (location.hash || "#/").slice(2).split("/").map(decodeURIComponent);
  try {
    if (parts[0] === "session" && parts.length >= 3) await showSession(parts[1], parts.slice(2).join("/"));
    else if (parts[0] === "recall" && parts.length >= 4) await showRecall(parts[1], parts[2], parts[3]);
    else if (parts[0] === "search") await showSearch();
    else if (parts[0] === "cost") await showCost();
    else await showSessions();
    document.body.dataset.view = parts[0] || "sessions";
  } catch (e) {
    setView(h("div", { class: "card failure" }, "The viewer could not load this page: " + e));
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => { route(); pollQueue(); });
