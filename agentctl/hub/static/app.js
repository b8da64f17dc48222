// The hub page: sessions by task, one neutral MCP trigger each; a popover (precise pointer: hover, focus,
// click to pin) or a bottom drawer (coarse pointer) with the current attempt's servers. Live through
// server-sent events read with fetch (so the token stays in a header). Text only: see views.js.
import {
  FILTERS, GRACE_TEXT, attention, attentionText, compareKeys, el, historyView, instant, matches, outputLines, outputView,
  serverDetail, serverList, sortKey, terminalScreen, terminalView, toolDetail, toolList,
} from "/views.js";

const TOKEN_KEY = "agentctl-hub-token";
const coarse = matchMedia("(pointer: coarse)");
const $ = (id) => document.getElementById(id);
const state = {
  token: null,
  sessions: new Map(), // session_id -> session view
  rows: new Map(), // session_id -> {li, trigger, panel, wrap, nav}
  open: null, // {sid, pinned, drawer}
  outputWarning: "",
  terminalWarning: "",
  closeTimer: null,
  noFocusOpen: null, // a trigger that must not reopen on focus (after Escape or a closing click)
  gen: 0, // one sign-in: a new token ends the previous one's update stream
  abort: null,
  skew: 0, // the hub's clock minus this browser's, so "delivered for N minutes" does not depend on either
  arrangeLater: false, // rows do not move under an open panel: the order is applied when it closes
};
const now = () => Date.now() + state.skew;

// ---- token and API ---------------------------------------------------------------------------------

function takeToken() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname); // out of the address bar and the history
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

// Signed out: nothing the last token showed stays on the page. `refused`: a token was sent and the hub said no.
function needToken(refused) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.abort?.abort();
  close({ focus: false });
  state.sessions.clear();
  state.rows.clear();
  $("tasks").replaceChildren();
  $("controls").hidden = true;
  $("empty").hidden = true;
  $("no-match").hidden = true;
  $("token-refused").hidden = !refused;
  $("token-title").textContent = refused ? "The hub refused this token" : "This page needs the hub's token";
  $("token-needed").hidden = false;
  setLive(refused ? "not signed in: token refused" : "not signed in");
  $("token-input").focus();
}

async function api(path, { method = "GET", body } = {}) {
  const headers = { Authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, cache: "no-store", credentials: "omit",
    body: body === undefined ? undefined : JSON.stringify(body) });
  if (resp.status === 401) { needToken(true); throw new Error("the hub token is missing or wrong"); }
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(data.error || `the hub answered HTTP ${resp.status}`);
  return data;
}

const sid$ = (sid) => encodeURIComponent(sid);
const setLive = (text) => { $("live").textContent = text; };

function toast(text) {
  const t = $("toast");
  t.textContent = text;
  t.classList.add("shown");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => t.classList.remove("shown"), 4000);
}

// ---- live updates ----------------------------------------------------------------------------------

function handleEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  if (!data.length) return;
  const payload = JSON.parse(data.join("\n"));
  if (event === "status") applyStatus(payload);
  else if (event === "session") upsert(payload);
}

async function listen(gen, signal) {
  let backoff = 500;
  const current = () => state.token && state.gen === gen;
  while (current()) {
    try {
      const resp = await fetch("/api/events", { headers: { Authorization: `Bearer ${state.token}` }, cache: "no-store",
        signal });
      if (!current()) return;
      if (resp.status === 401) { needToken(true); return; }
      if (!resp.ok || !resp.body) throw new Error(String(resp.status));
      setLive("live");
      backoff = 500;
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done || !current()) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          handleEvent(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
        }
      }
    } catch (err) { /* the hub went away (or a new sign-in aborted this one): retry below */ }
    if (!current()) return;
    setLive("reconnecting…");
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 5000);
  }
}

// ---- sessions --------------------------------------------------------------------------------------

function applyStatus(status) {
  const hubNow = instant(status.generated_at);
  if (hubNow !== null) state.skew = hubNow - Date.now();
  state.outputWarning = status.output_warning;
  state.terminalWarning = status.terminal_warning;
  for (const session of status.sessions) upsert(session, { arrange: false });
  arrange();
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

function upsert(session, { arrange: rearrange = true } = {}) {
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
  if (rearrange) arrange();
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

// The filter, the search and the order, applied to the rows in place (a row is moved only when its place changed).
function arrange() {
  const filter = $("filter").value || "all";
  const query = $("search").value.trim();
  const t = now();
  const sessions = [...state.sessions.values()];
  const shown = sessions.filter((s) => matches(s, filter, query, t));
  if (state.open && !shown.some((s) => s.session_id === state.open.sid)) close({ focus: false });
  const visible = new Set(shown.map((s) => s.session_id));
  for (const [sid, row] of state.rows) row.li.hidden = !visible.has(sid);
  $("controls").hidden = sessions.length === 0;
  $("empty").hidden = sessions.length > 0;
  $("no-match").hidden = sessions.length === 0 || shown.length > 0;
  $("shown").textContent = sessions.length ? `showing ${shown.length} of ${sessions.length} sessions` : "";
  if (state.open) { state.arrangeLater = true; return; }
  state.arrangeLater = false;
  const keys = new Map(sessions.map((s) => [s.session_id, sortKey(s, t)]));
  const byTask = new Map();
  for (const s of [...sessions].sort((a, b) => compareKeys(keys.get(a.session_id), keys.get(b.session_id)))) {
    if (!byTask.has(s.task_id)) byTask.set(s.task_id, []);
    byTask.get(s.task_id).push(s.session_id);
  }
  // A task goes where its first shown session goes; a task with nothing shown is hidden.
  const tasks = [...byTask.entries()].sort(([, a], [, b]) => {
    const first = (ids) => ids.find((id) => visible.has(id)) ?? ids[0];
    return (visible.has(first(a)) ? 0 : 1) - (visible.has(first(b)) ? 0 : 1)
      || compareKeys(keys.get(first(a)), keys.get(first(b)));
  });
  const container = $("tasks");
  tasks.forEach(([taskId, ids], i) => {
    const list = taskList(taskId);
    const section = list.closest("section.task");
    section.hidden = !ids.some((id) => visible.has(id));
    if (container.children[i] !== section) container.insertBefore(section, container.children[i] || null);
    ids.forEach((id, j) => {
      const li = state.rows.get(id).li;
      if (list.children[j] !== li) list.insertBefore(li, list.children[j] || null);
    });
  });
}

function refreshAttention() {
  for (const [sid, row] of state.rows) showAttention(row, state.sessions.get(sid));
  arrange();
}

let panelSeq = 0;
function createRow(session) {
  const sid = session.session_id;
  const id = `panel-${++panelSeq}`;
  const count = el("span", { class: "count" });
  const trigger = el("button", { type: "button", class: "mcp-trigger", ariaExpanded: "false", ariaControls: id,
    ariaHaspopup: "dialog", data: { sid } }, el("span", { text: "MCP" }), count);
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
  const row = { li, trigger, panel, wrap, count, link, meta, agent, attention: attentionEl, why, nav: [{ view: "servers" }] };
  state.rows.set(sid, row);
  wire(sid, row);
  taskList(session.task_id).append(li);
  return row;
}

// ---- the popover and the drawer ----------------------------------------------------------------------

const isOpen = (sid) => state.open && state.open.sid === sid;

function open(sid, pinned) {
  if (state.open && state.open.sid !== sid) close({ focus: false });
  clearTimeout(state.closeTimer);
  const row = state.rows.get(sid);
  if (isOpen(sid)) { state.open.pinned = state.open.pinned || pinned; return; }
  const drawer = coarse.matches;
  state.open = { sid, pinned: pinned || drawer, drawer };
  row.nav = [{ view: "servers" }];
  row.panel.classList.toggle("drawer", drawer);
  row.panel.classList.toggle("popover", !drawer);
  if (drawer) row.panel.setAttribute("aria-modal", "true"); else row.panel.removeAttribute("aria-modal");
  row.panel.hidden = false;
  row.trigger.setAttribute("aria-expanded", "true");
  renderPanel(sid);
  if (drawer) {
    $("backdrop").hidden = false;
    document.body.classList.add("drawer-open");
    row.panel.querySelector(".panel-title").focus();
  } else place(row);
}

function close({ focus }) {
  if (!state.open) return;
  const row = state.rows.get(state.open.sid);
  const wasDrawer = state.open.drawer;
  state.open = null;
  clearTimeout(state.closeTimer);
  row.panel.hidden = true;
  dropTerminal(row);
  row.panel.replaceChildren(); // nothing fetched (agent output above all) stays in the page
  row.trigger.setAttribute("aria-expanded", "false");
  if (wasDrawer) { $("backdrop").hidden = true; document.body.classList.remove("drawer-open"); }
  if (focus) { state.noFocusOpen = row.trigger; row.trigger.focus(); }
  if (state.arrangeLater) arrange();
}

function place(row) {
  const panel = row.panel;
  panel.style.maxHeight = "";
  const rect = panel.getBoundingClientRect();
  const room = window.innerHeight - rect.top - 12;
  if (room > 200) panel.style.maxHeight = `${Math.floor(room)}px`;
}

function scheduleClose(sid) {
  clearTimeout(state.closeTimer);
  state.closeTimer = setTimeout(() => {
    const row = state.rows.get(sid);
    if (isOpen(sid) && !state.open.pinned && !row.wrap.matches(":hover") && !row.wrap.contains(document.activeElement)) {
      close({ focus: false });
    }
  }, 150);
}

function wire(sid, row) {
  const { trigger, wrap, panel } = row;
  trigger.addEventListener("pointerenter", (e) => {
    if (e.pointerType === "mouse" && !coarse.matches) open(sid, false);
  });
  wrap.addEventListener("pointerleave", (e) => {
    if (e.pointerType === "mouse" && isOpen(sid) && !state.open.pinned) scheduleClose(sid);
  });
  wrap.addEventListener("pointerenter", () => { if (isOpen(sid)) clearTimeout(state.closeTimer); });
  trigger.addEventListener("focus", () => {
    if (coarse.matches || state.noFocusOpen === trigger) return;
    open(sid, false);
  });
  trigger.addEventListener("blur", () => { if (state.noFocusOpen === trigger) state.noFocusOpen = null; });
  wrap.addEventListener("focusout", (e) => {
    if (!isOpen(sid) || state.open.pinned || state.open.drawer) return;
    if (!e.relatedTarget || !wrap.contains(e.relatedTarget)) scheduleClose(sid);
  });
  trigger.addEventListener("click", () => {
    if (isOpen(sid) && state.open.pinned) { close({ focus: false }); state.noFocusOpen = trigger; return; }
    open(sid, true);
  });
  panel.addEventListener("click", () => { if (isOpen(sid)) state.open.pinned = true; });
}

// The drawer covers the page: Tab cycles inside it until it closes.
function trapTab(e) {
  const panel = state.rows.get(state.open.sid).panel;
  const items = [...panel.querySelectorAll("button:not([disabled]), summary, textarea")];
  if (!items.length) return;
  const first = items[0];
  const last = items[items.length - 1];
  if (!panel.contains(document.activeElement)) { e.preventDefault(); first.focus(); }
  else if (e.shiftKey && document.activeElement === first) { e.preventDefault(); last.focus(); }
  else if (!e.shiftKey && document.activeElement === last) { e.preventDefault(); first.focus(); }
}

document.addEventListener("keydown", (e) => {
  if (e.key === "Tab" && state.open?.drawer) { trapTab(e); return; }
  if (e.key !== "Escape" || !state.open) return;
  const row = state.rows.get(state.open.sid);
  e.preventDefault();
  close({ focus: state.open.drawer || row.wrap.contains(document.activeElement) });
});

document.addEventListener("pointerdown", (e) => {
  if (!state.open) return;
  const row = state.rows.get(state.open.sid);
  if (!row.wrap.contains(e.target)) close({ focus: state.open.drawer });
});

coarse.addEventListener("change", () => { if (state.open) close({ focus: false }); });

// ---- panel views -----------------------------------------------------------------------------------

const TITLES = { servers: "MCP servers", server: "Server", tools: "Tool catalog", tool: "Tool",
  history: "Attempt history", output: "Recent agent output", terminal: "Agent terminal" };

function navigate(sid, entry) {
  const row = state.rows.get(sid);
  const top = row.nav[row.nav.length - 1];
  top.scroll = row.panel.scrollTop; // the panel is the scroller, popover and drawer alike
  top.focusKey = document.activeElement?.dataset?.key;
  row.nav.push(entry);
  renderPanel(sid);
  row.panel.querySelector(".panel-title").focus();
}

function back(sid) {
  const row = state.rows.get(sid);
  if (row.nav.length > 1) row.nav.pop();
  renderPanel(sid, { restore: true });
}

function renderPanel(sid, { live = false, restore = false } = {}) {
  const row = state.rows.get(sid);
  const session = state.sessions.get(sid);
  const entry = row.nav[row.nav.length - 1];
  // Views fetched on entry (tools, history, output) are not redrawn by live updates.
  if (live && !["servers", "server"].includes(entry.view)) return;
  const keep = live ? document.activeElement?.dataset?.key : null;
  const scroll = row.panel.scrollTop;
  dropTerminal(row);
  const body = el("div", { class: "panel-body" });
  const title = el("h2", { class: "panel-title", tabindex: "-1",
    text: entry.view === "server" ? entry.name : entry.view === "tool" ? entry.name : TITLES[entry.view] });
  const head = el("div", { class: "panel-head" },
    row.nav.length > 1 ? el("button", { type: "button", class: "back", text: "Back", data: { key: "back" },
      onclick: () => back(sid) }) : null,
    title,
    el("button", { type: "button", class: "close", ariaLabel: "Close", text: "×", data: { key: "close" },
      onclick: () => close({ focus: true }) }));
  row.panel.replaceChildren(head, body);
  body.append(...viewContent(sid, session, entry).filter(Boolean));
  if (entry.view === "servers") body.append(footer(sid));
  if (live) {
    row.panel.scrollTop = scroll;
    if (keep) row.panel.querySelector(`[data-key="${CSS.escape(keep)}"]`)?.focus({ preventScroll: true });
  } else if (restore) {
    row.panel.scrollTop = entry.scroll || 0;
    const target = entry.focusKey && row.panel.querySelector(`[data-key="${CSS.escape(entry.focusKey)}"]`);
    (target || title).focus({ preventScroll: true });
  } else row.panel.scrollTop = 0;
}

// A view fetched when entered, kept in its navigation entry so Back redraws it at once, where it was.
function fetched(entry, url, render) {
  if (entry.data) return render(entry.data);
  const holder = el("p", { class: "secondary", text: "loading…" });
  api(url).then((data) => {
    entry.data = data;
    if (holder.isConnected) holder.replaceWith(...render(data).filter(Boolean));
  }).catch((err) => { holder.textContent = err.message; holder.className = "warn"; });
  return [holder];
}

function viewContent(sid, session, entry) {
  switch (entry.view) {
    case "servers":
      return serverList(session, (name) => navigate(sid, { view: "server", name }));
    case "server": {
      const server = session.attempt?.servers.find((s) => s.name === entry.name);
      if (!server) return [el("p", { class: "note", text: "this server is not in the current attempt any more" })];
      return serverDetail(server, { test: (name, button, out) => testEndpoint(sid, name, button, out),
        tools: () => navigate(sid, { view: "tools" }) });
    }
    case "tools":
      return fetched(entry, `/api/sessions/${sid$(sid)}/tools`,
        (data) => toolList(data, (name) => navigate(sid, { view: "tool", name })));
    case "tool":
      return fetched(entry, `/api/sessions/${sid$(sid)}/tools/${encodeURIComponent(entry.name)}`, toolDetail);
    case "history":
      return fetched(entry, `/api/sessions/${sid$(sid)}/history`, historyView);
    case "output":
      return outputView(state.outputWarning, (out, button) => showOutput(sid, out, button));
    case "terminal":
      return terminalView(state.terminalWarning, (out, button) => showTerminal(sid, out, button));
    default:
      return [];
  }
}

function footer(sid) {
  return el("div", { class: "panel-foot" },
    el("button", { type: "button", class: "action", text: "Attempt history", data: { key: "history" },
      onclick: () => navigate(sid, { view: "history" }) }),
    el("button", { type: "button", class: "action", text: "Copy diagnostics", data: { key: "copy" },
      onclick: () => copyDiagnostics(sid) }),
    el("button", { type: "button", class: "action", text: "View recent agent output", data: { key: "output" },
      onclick: () => navigate(sid, { view: "output" }) }),
    state.sessions.get(sid)?.terminal ? el("button", { type: "button", class: "action", text: "View agent terminal",
      data: { key: "terminal" }, onclick: () => navigate(sid, { view: "terminal" }) }) : null);
}

// ---- actions ---------------------------------------------------------------------------------------

async function testEndpoint(sid, name, button, out) {
  button.disabled = true;
  out.replaceChildren(el("p", { class: "secondary", text: "testing from the daemon…" }));
  try {
    const data = await api(`/api/sessions/${sid$(sid)}/test-endpoint`, { method: "POST", body: { server: name } });
    out.replaceChildren(el("p", { class: `test tone-${data.view.tone}`, text: data.view.line }),
      el("p", { class: "note", text: data.view.note }));
  } catch (err) {
    out.replaceChildren(el("p", { class: "warn", text: err.message }));
  } finally {
    button.disabled = false;
  }
}

async function showOutput(sid, out, button) {
  button.disabled = true;
  try {
    outputLines(out, await api(`/api/sessions/${sid$(sid)}/agent-output`, { method: "POST" }));
  } catch (err) {
    out.replaceChildren(el("p", { class: "warn", text: err.message }));
  } finally {
    button.disabled = false;
  }
}

// The agent's terminal, read-only in xterm.js (vendored; loaded the first time a terminal is shown). Each click
// fetches the screen again; nothing of it outlives the panel (the terminal is disposed when the panel changes).
let xtermLoading = null;
function loadXterm() {
  xtermLoading ??= new Promise((resolve, reject) => {
    document.head.append(el("link", { rel: "stylesheet", href: "/vendor/xterm/xterm.css" }));
    const script = el("script", { src: "/vendor/xterm/xterm.js" });
    script.addEventListener("load", () => resolve(window.Terminal));
    script.addEventListener("error", () => { xtermLoading = null; reject(new Error("the terminal widget did not load")); });
    document.head.append(script);
  });
  return xtermLoading;
}

// xterm.js styles its screen with <style> elements and style attributes, both of which the page's CSP
// (style-src 'self') refuses. The same rules go in through CSSOM instead (a constructed stylesheet, and
// element.style for a cell's own colours), which the CSP allows: the page keeps its strict policy.
const termSheet = new CSSStyleSheet();
function restyle(host) {
  termSheet.replaceSync([...host.querySelectorAll("style")].map((node) => node.textContent).join("\n"));
  if (!document.adoptedStyleSheets.includes(termSheet)) document.adoptedStyleSheets = [...document.adoptedStyleSheets, termSheet];
  for (const node of host.querySelectorAll(".xterm-rows [style]")) node.style.cssText = node.getAttribute("style");
}

function dropTerminal(row) {
  row.term?.dispose();
  row.term = null;
  termSheet.replaceSync("");
}

function bytesOf(base64) {
  const text = atob(base64);
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

async function showTerminal(sid, out, button) {
  const row = state.rows.get(sid);
  button.disabled = true;
  try {
    const [Terminal, data] = await Promise.all([loadXterm(),
      api(`/api/sessions/${sid$(sid)}/agent-terminal`, { method: "POST" })]);
    if (!out.isConnected) return;
    dropTerminal(row);
    row.term = terminalScreen(out, data, (host, view) => {
      // linkHandler: a link the agent printed (OSC 8) is shown, never opened: the screen is the agent's words.
      const term = new Terminal({ disableStdin: true, cursorBlink: false, rows: view.rows || 24, cols: view.cols || 80,
        scrollback: 1000, fontSize: 12, linkHandler: { activate() {} } });
      term.onRender(() => restyle(host));
      term.open(host);
      term.write(bytesOf(view.screen));
      restyle(host);
      return term;
    });
    button.textContent = "Refresh";
  } catch (err) {
    out.replaceChildren(el("p", { class: "warn", text: err.message }));
  } finally {
    button.disabled = false;
  }
}

async function copyDiagnostics(sid) {
  try {
    const { text } = await api(`/api/sessions/${sid$(sid)}/diagnostics`);
    try {
      await navigator.clipboard.writeText(text);
      toast("Diagnostics copied: sanitized, no agent output.");
    } catch (err) {
      // No clipboard (permission, or not a secure context): show the text to copy by hand.
      const row = state.rows.get(sid);
      const area = el("textarea", { class: "copy", readOnly: true, value: text, ariaLabel: "diagnostics" });
      row.panel.querySelector(".panel-body").append(area);
      area.select();
      toast("Select-all and copy the diagnostics below.");
    }
  } catch (err) {
    toast(err.message);
  }
}

// ---- start -----------------------------------------------------------------------------------------

$("backdrop").addEventListener("click", () => close({ focus: true }));
$("filter").replaceChildren(...FILTERS.map(([value, label]) => el("option", { value, text: label })));
$("filter").addEventListener("change", () => arrange());
$("search").addEventListener("input", () => arrange());
$("attention-rule").textContent = "Needs attention: a failed server, a session error, or no server sent to the agent. " +
  `agentctl's own endpoint delivered more than ${GRACE_TEXT} ago is “not contacted yet”, not a failure: a lazy agent ` +
  "may connect later (third-party servers stay “delivered”). Sorted: needs attention first, then the latest contact.";
setInterval(() => { if (state.token) refreshAttention(); }, 15000); // "delivered for too long" happens with no event

$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const value = $("token-input").value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  $("token-input").value = "";
  start();
});

async function start() {
  const gen = ++state.gen;
  state.abort?.abort();
  const abort = new AbortController();
  state.abort = abort;
  state.token = takeToken();
  if (!state.token) { needToken(false); return; }
  $("token-needed").hidden = true;
  $("token-refused").hidden = true;
  setLive("connecting…");
  try {
    const status = await api("/api/status");
    if (gen !== state.gen) return;
    applyStatus(status);
  } catch (err) {
    if (gen !== state.gen || !state.token) return;
    setLive(err.message);
  }
  listen(gen, abort.signal);
}

// An address with #token=… pasted into the open page changes only the fragment: sign in with it, no reload.
window.addEventListener("hashchange", () => { if (/(?:^#|&)token=/.test(location.hash)) start(); });

start();
