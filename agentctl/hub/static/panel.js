// The MCP panel of a session: a popover (precise pointer: hover, focus, click to pin) or a bottom drawer (coarse
// pointer), its views (servers, a server, the tool catalog, history, agent output, the terminal) and actions.
import {
  el, historyView, outputLines, outputView, serverDetail, serverList, terminalView, toolDetail, toolList,
} from "/views.js";
import { $, api, coarse, sid$, state, toast } from "/state.js";
import { dropTerminal, showTerminal } from "/terminal.js";

// ---- the popover and the drawer ----------------------------------------------------------------------

export const isOpen = (sid) => state.open && state.open.sid === sid;

export function open(sid, pinned) {
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

export function close({ focus }) {
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
  if (state.arrangeLater) state.onClosed?.();
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

export function wire(sid, row) {
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

export function renderPanel(sid, { live = false, restore = false } = {}) {
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
