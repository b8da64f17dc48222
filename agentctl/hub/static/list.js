// The session list: a window of the hub's sessions, asked for page by page (the hub filters, searches and orders
// them, so the page never holds the whole fleet), grouped by task in the hub's order: needs attention first,
// then a connected daemon, then the latest contact. Live updates redraw a loaded row at once and reload the
// window shortly after (a session may have moved, arrived or stopped matching), never under an open panel.
import { attention, attentionText, el } from "/views.js";
import { $, api, now, state } from "/state.js";
import { close, isOpen, renderPanel, wire } from "/panel.js";

export const PAGE = 50;
const MAX_PAGE = 200; // the hub's bound on one answer
const RELOAD_MS = 1000; // live updates reload the window at most this often

const list = { seq: 0, total: 0, matched: 0, timer: null, last: 0, searchTimer: null };

function params(offset, limit) {
  const q = new URLSearchParams({ filter: $("filter").value || "all", offset: String(offset), limit: String(limit) });
  const text = $("search").value.trim();
  if (text) q.set("q", text);
  return q.toString();
}

// The window from the first session: as many as are loaded now (at least a page), or the next page after them.
export async function load({ more = false } = {}) {
  const seq = ++list.seq;
  const offset = more ? state.order.length : 0;
  const limit = more ? PAGE : Math.min(MAX_PAGE, Math.max(PAGE, state.order.length));
  list.last = Date.now();
  const data = await api(`/api/sessions?${params(offset, limit)}`);
  if (seq !== list.seq || !state.token) return null; // a newer question was asked meanwhile
  applyPage(data, more);
  return data;
}

export function applyPage(data, more = false) {
  list.total = data.total;
  list.matched = data.matched;
  const ids = data.sessions.map((s) => s.session_id);
  const order = more ? [...state.order, ...ids.filter((id) => !state.sessions.has(id))] : ids;
  const keep = new Set(order);
  if (state.open && !keep.has(state.open.sid)) close({ focus: false });
  for (const sid of [...state.rows.keys()]) {
    if (keep.has(sid)) continue;
    state.rows.get(sid).li.remove();
    state.rows.delete(sid);
    state.sessions.delete(sid);
  }
  state.order = order;
  for (const session of data.sessions) upsert(session);
  arrange();
}

// A live update: a loaded row is redrawn now; the window is reloaded soon, as the session may have moved.
export function changed(session) {
  if (state.sessions.has(session.session_id)) upsert(session);
  reloadSoon();
}

export function reloadSoon() {
  if (list.timer) return;
  const wait = Math.max(0, RELOAD_MS - (Date.now() - list.last));
  list.timer = setTimeout(() => {
    list.timer = null;
    if (!state.token) return;
    if (state.open) { state.arrangeLater = true; return; } // rows do not move under an open panel
    load().catch(() => {});
  }, wait);
}

export function clear() {
  list.seq++;
  clearTimeout(list.timer);
  list.timer = null;
  state.sessions.clear();
  state.rows.clear();
  state.order = [];
  $("tasks").replaceChildren();
}

// The search and the filter: asked of the hub (the search once typing pauses).
export function wireControls() {
  const ask = () => load().catch((err) => { $("shown").textContent = err.message; });
  $("filter").addEventListener("change", ask);
  $("search").addEventListener("input", () => {
    clearTimeout(list.searchTimer);
    list.searchTimer = setTimeout(ask, 150);
  });
  $("more").addEventListener("click", () => load({ more: true }).catch((err) => { $("shown").textContent = err.message; }));
  state.onClosed = () => load().catch(() => {});
}

function taskList(taskId) {
  let section = [...$("tasks").children].find((s) => s.dataset.task === taskId);
  if (!section) {
    section = el("section", { class: "task", data: { task: taskId } },
      el("h2", {}, el("span", { class: "secondary", text: "task " }), el("span", { text: taskId })),
      el("ul", { class: "sessions" }));
    $("tasks").append(section);
  }
  return section.querySelector("ul.sessions");
}

function upsert(session) {
  const sid = session.session_id;
  state.sessions.set(sid, session);
  let row = state.rows.get(sid);
  if (!row) row = createRow(session);
  showAttention(row, session);
  const count = session.attempt ? session.attempt.servers.length : 0;
  row.count.textContent = String(count);
  row.trigger.setAttribute("aria-label", `MCP servers of session ${sid}: ${count}`);
  row.link.textContent = session.link;
  row.meta.textContent = `execution ${session.execution_id} · last contact ${session.last_contact}` +
    (session.executions > 1 ? ` · ${session.executions} executions` : "");
  row.agent.textContent = session.agent + (session.stale ? ` · ${session.stale}` : "");
  // Heartbeats only move "last contact": redraw an open panel when the attempt itself changed.
  const attempt = JSON.stringify(session.attempt);
  if (attempt !== row.attempt) {
    row.attempt = attempt;
    if (isOpen(sid)) renderPanel(sid, { live: true });
  }
}

// Next to the trigger, in words: how many servers need attention (the trigger itself stays neutral).
function showAttention(row, session) {
  const found = attention(session, now());
  const text = attentionText(found);
  if (row.attention.textContent !== text) row.attention.textContent = text;
  row.attention.classList.toggle("needs", found.needs);
  const lines = [...found.servers.map((s) => el("span", { text: `${s.name} ${s.why}` })), // "waiting": muted
    ...(found.sessionError ? [el("span", { text: session.attempt.session_error })] : []),
    ...found.waiting.map((s) => el("span", { class: "waiting", text: `${s.name} ${s.why}` }))];
  row.why.replaceChildren(...lines);
  row.why.hidden = !lines.length;
}

export function refreshAttention() {
  for (const [sid, row] of state.rows) showAttention(row, state.sessions.get(sid));
}

const count = (n) => n.toLocaleString("en-US");

// The window in the hub's order, grouped by task: a task goes where its first session goes.
function arrange() {
  const { total, matched } = list;
  const loaded = state.order.length;
  $("controls").hidden = total === 0;
  $("empty").hidden = total > 0;
  $("no-match").hidden = total === 0 || matched > 0;
  $("shown").textContent = !total ? "" : loaded < matched
    ? `showing ${count(loaded)} of ${count(matched)} matching sessions (${count(total)} in all)`
    : `showing ${count(matched)} of ${count(total)} sessions`;
  const more = $("more");
  more.hidden = loaded >= matched;
  more.textContent = `Show ${count(Math.min(PAGE, matched - loaded))} more`;
  state.arrangeLater = false;
  const byTask = new Map();
  for (const sid of state.order) {
    const taskId = state.sessions.get(sid).task_id;
    if (!byTask.has(taskId)) byTask.set(taskId, []);
    byTask.get(taskId).push(sid);
  }
  const container = $("tasks");
  const sections = [...byTask.entries()].map(([taskId, ids], i) => {
    const ul = taskList(taskId);
    const section = ul.closest("section.task");
    if (container.children[i] !== section) container.insertBefore(section, container.children[i] || null);
    ids.forEach((id, j) => {
      const li = state.rows.get(id).li;
      if (ul.children[j] !== li) ul.insertBefore(li, ul.children[j] || null);
    });
    return section;
  });
  const shown = new Set(sections);
  for (const section of [...container.children]) if (!shown.has(section)) section.remove();
}

let panelSeq = 0;
function createRow(session) {
  const sid = session.session_id;
  const id = `panel-${++panelSeq}`;
  const countEl = el("span", { class: "count" });
  const trigger = el("button", { type: "button", class: "mcp-trigger", ariaExpanded: "false", ariaControls: id,
    ariaHaspopup: "dialog", data: { sid } }, el("span", { text: "MCP" }), countEl);
  const panel = el("div", { class: "panel", id, role: "dialog", ariaLabel: `MCP servers of session ${sid}`, hidden: true });
  const wrap = el("div", { class: "mcp" }, trigger, panel);
  const attentionEl = el("span", { class: "attention", id: `${id}-attention` });
  trigger.setAttribute("aria-describedby", attentionEl.id);
  const why = el("p", { class: "why", hidden: true });
  const link = el("span", { class: "link" });
  const meta = el("p", { class: "secondary" });
  const agent = el("p", { class: "secondary" });
  const li = el("li", { class: "session", data: { sid } },
    el("div", { class: "info" }, el("p", { class: "sid" }, el("span", { text: sid }), link), why, meta, agent),
    el("div", { class: "side" }, attentionEl, wrap));
  const row = { li, trigger, panel, wrap, count: countEl, link, meta, agent, attention: attentionEl, why,
    nav: [{ view: "servers" }] };
  state.rows.set(sid, row);
  wire(sid, row);
  taskList(session.task_id).append(li);
  return row;
}
