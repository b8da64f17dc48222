// The MCP panel's views, built as DOM nodes from the hub's JSON. Text only: every string goes in through
// textContent or text nodes (never parsed as HTML), so a description, schema or summary can never become markup.

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "data") for (const [k, v] of Object.entries(value)) node.dataset[k] = v;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key.startsWith("aria") || key === "role" || key === "tabindex" || key === "for") node.setAttribute(key.replace(/^aria([A-Z])/, (m, c) => "aria-" + c.toLowerCase()), value);
    else node[key] = value;
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

const note = (text, cls = "note") => (text ? el("p", { class: cls, text }) : null);

export function stateLabel(server) {
  return el("span", { class: `state tone-${server.tone}` },
    el("span", { class: "dot", ariaHidden: "true" }), el("span", { class: "label", text: server.label }));
}

function attemptHead(attempt) {
  return el("div", { class: "attempt" },
    el("p", { class: "secondary", text: `attempt ${attempt.attempt_id} (${attempt.origin})` +
      (attempt.acp_session_id ? ` · ACP session ${attempt.acp_session_id}` : "") }),
    note(attempt.times, "secondary"),
    ...(attempt.notices || []).map((n) => note(n, "secondary")),
    ...(attempt.required || []).map((r) => note(`required · ${r}`, "secondary required")),
    note(attempt.session_error, "warn"),
    note(attempt.dropped));
}

// The current attempt's servers: state colour, label and the plain-language line, one button each.
export function serverList(session, onServer) {
  const attempt = session.attempt;
  if (!attempt) return [note("no attachment attempt yet (no session has been opened)")];
  const items = attempt.servers.map((server) =>
    el("li", {},
      el("button", { type: "button", class: "server", data: { key: `server:${server.name}`, server: server.name },
        onclick: () => onServer(server.name) },
        el("span", { class: "row" }, el("span", { class: "name", text: server.name }), stateLabel(server)),
        el("span", { class: "explain", text: server.explanation }),
        ...server.details.map((d) => el("span", { class: "detail", text: d })))));
  return [attemptHead(attempt),
    items.length ? el("ul", { class: "servers" }, items) : note("no MCP servers in this attempt")];
}

// A failed, filtered or unavailable step names its reason code: the row's plain-language line comes first and
// the bare code stays as detail.
const REASON_STEPS = new Set(["failed", "filtered", "unavailable"]);

export function checklist(server) {
  const steps = server.steps.map((step) =>
    el("li", { class: step.done ? "done" : "open", data: { step: step.step } },
      el("span", { class: "mark", text: step.mark }),
      el("span", { class: "step", text: step.label }),
      el("span", { class: "when", text: step.text }),
      step.done && REASON_STEPS.has(step.step) && server.status === step.step
        ? el("span", { class: "plain", text: server.explanation }) : null,
      step.detail ? el("span", { class: "detail", text: step.detail }) : null));
  return [el("ol", { class: "checklist", ariaLabel: `attachment checklist of ${server.name}` }, steps),
    note(server.hidden_note)];
}

function testResult(view) {
  if (!view) return [];
  return [el("p", { class: `test tone-${view.tone}`, text: view.line }), note(view.note)];
}

// One server: its state, checklist with times, reachability test, and the catalog for the built-in one.
export function serverDetail(server, actions) {
  const result = el("div", { class: "test-result", ariaLive: "polite" }, testResult(server.endpoint_test));
  const test = el("button", { type: "button", class: "action", text: "Test endpoint", data: { key: "test" },
    onclick: () => actions.test(server.name, test, result) });
  return [
    el("p", { class: "server-head" }, el("span", { class: "name", text: server.name }), stateLabel(server)),
    el("p", { class: "explain", text: server.explanation }),
    ...server.details.map((d) => note(d, "detail")),
    note(server.where, "secondary"),
    el("h3", { text: "Attachment checklist" }),
    ...checklist(server),
    note(server.catalog_note),
    el("h3", { text: "Reachability" }),
    note("A test from the daemon with the stored configuration; it never changes the status above."),
    test, result,
    el("h3", { text: "Tools" }),
    server.builtin
      ? el("button", { type: "button", class: "action", data: { key: "tools" }, onclick: () => actions.tools(),
        text: server.tool_count != null ? `Tool catalog (${server.tool_count})` : "Tool catalog" })
      : note(server.no_catalog_note),
  ];
}

export function toolList(data, onTool) {
  const out = [];
  if (!data.loaded) out.push(note(data.message));
  else {
    out.push(el("p", { class: "secondary", text: data.head }));
    out.push(el("ul", { class: "tools" }, data.tools.map((tool) =>
      el("li", {}, el("button", { type: "button", class: "tool", data: { key: `tool:${tool.name}` },
        onclick: () => onTool(tool.name) },
        el("span", { class: "row" }, el("span", { class: "name", text: tool.name }),
          tool.tokens ? el("span", { class: "tokens", text: tool.tokens }) : null),
        el("span", { class: "summary", text: tool.summary }))))));
  }
  out.push(...data.notes.map((n) => note(n)));
  out.push(note(data.third_party));
  return out;
}

export function toolDetail(tool) {
  const out = [
    el("p", { class: "server-head" }, el("span", { class: "name", text: tool.name }),
      tool.tokens ? el("span", { class: "tokens", text: tool.tokens }) : null),
    note(`${tool.server}, attempt ${tool.attempt_id}`, "secondary"),
    note(tool.estimate_note),
    el("h3", { text: "Description" }),
    el("p", { class: "description", text: tool.description }),
    note(tool.description_note),
    el("h3", { text: "Arguments" }),
  ];
  if (tool.schema_note) return [...out, note(tool.schema_note)];
  if (!tool.arguments.length) out.push(note("(no arguments)"));
  else {
    out.push(el("dl", { class: "args" }, tool.arguments.map((a) => [
      el("dt", {}, el("span", { class: "name", text: a.name }),
        el("span", { class: "type", text: ` ${a.type}` }), el("span", { class: "req", text: a.required ? " required" : " optional" })),
      el("dd", { text: a.description || "—" }),
    ])));
  }
  out.push(el("h3", { text: "Input schema (JSON)" }), el("pre", { class: "schema", text: tool.schema }));
  return out;
}

function compactServers(attempt) {
  return el("ul", { class: "servers compact" }, attempt.servers.map((server) =>
    el("li", { data: { server: server.name } },
      el("span", { class: "row" }, el("span", { class: "name", text: server.name }), stateLabel(server)),
      el("span", { class: "explain", text: server.explanation }),
      el("details", {}, el("summary", { text: "checklist" }), ...checklist(server)))));
}

export function historyView(data) {
  const out = [el("h3", { text: "Executions, newest first" }),
    el("ul", { class: "plain" }, data.executions.map((e) =>
      el("li", { class: "secondary", text: `${e.execution_id} (${e.flags}), last contact ${e.last_contact}` })))];
  if (!data.snapshot) return [...out, note("no snapshot received for this execution yet")];
  out.push(el("h3", { text: "Previous attempts, newest first" }));
  if (!data.previous.length) out.push(note("none: the current attempt is the first"));
  for (const attempt of data.previous) {
    out.push(el("section", { class: "previous", data: { attempt: attempt.attempt_id } },
      attemptHead(attempt), compactServers(attempt)));
  }
  return out;
}

// Recent agent output: a warning first; the lines only after an explicit click, fetched fresh every time.
export function outputView(warning, onShow) {
  const body = el("div", { class: "output" });
  const show = el("button", { type: "button", class: "action danger", text: "Show recent agent output",
    data: { key: "show-output" }, onclick: () => onShow(body, show) });
  return [el("p", { class: "warn", text: `Warning: ${warning}` }), show, body];
}

export function outputLines(body, data) {
  body.replaceChildren(
    el("p", { class: "warn", text: `Warning: ${data.view.warning}` }),
    ...data.notes.map((n) => note(n)),
    data.view.empty ? null : el("pre", { class: "stderr", text: data.view.lines.join("\n") }));
}

// The agent's terminal: a warning first; its recent screen only after an explicit click (and on Refresh),
// fetched fresh every time and rendered by `render(host, view)` (a read-only xterm.js).
export function terminalView(warning, onShow) {
  const body = el("div", { class: "terminal" });
  const show = el("button", { type: "button", class: "action danger", text: "Show agent terminal",
    data: { key: "show-terminal" }, onclick: () => onShow(body, show) });
  return [el("p", { class: "warn", text: `Warning: ${warning}` }), show, body];
}

export function terminalScreen(body, data, render) {
  const host = el("div", { class: "terminal-screen", ariaLabel: "the agent's terminal (read-only)" });
  body.replaceChildren(
    el("p", { class: "warn", text: `Warning: ${data.view.warning}` }),
    ...data.notes.map((n) => note(n)),
    host);
  return render(host, data.view);
}

// ---- at a glance: which servers need attention, the filter and the order (pure: the clock is passed in) ----

// agentctl's own endpoint sees the agent connect, so "delivered" that lasts is worth a word; but an agent may
// connect lazily (at its first tool use), so it stays a neutral "not contacted yet", never a failure. Third-party
// servers connect to the agent directly, so "delivered" is all agentctl can ever see of them.
export const DELIVERED_GRACE_MS = 2 * 60 * 1000;
export const GRACE_TEXT = "2 minutes";

// Not sent to the agent at all: a session whose every server is one of these has no MCP server (why: each row's
// explanation, such as a transport the agent does not support or a folder Gemini CLI does not trust).
const NOT_SENT = new Set(["filtered", "unavailable"]);

// "2026-01-02 03:04:05 UTC" (the page's wording) or an ISO instant, as milliseconds; null when neither.
export function instant(text) {
  if (!text) return null;
  const iso = String(text).replace(" UTC", "Z").replace(" ", "T").replace(/(\.\d{3})\d+/, "$1");
  const ms = Date.parse(iso);
  return Number.isNaN(ms) ? null : ms;
}

function ago(ms) {
  const minutes = Math.floor(ms / 60000);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  return hours < 48 ? `${hours} h` : `${Math.floor(hours / 24)} days`;
}

// The servers of the current attempt that need attention, each with why in words (a failed server; every
// server, when none was sent), the session error, and, apart and neutral, agentctl's own endpoint delivered
// past the grace without a contact (`waiting`): absence is not failure.
export function attention(session, now) {
  const attempt = session.attempt;
  const rows = attempt ? attempt.servers : [];
  const servers = [];
  const waiting = [];
  const noneSent = rows.length > 0 && rows.every((server) => NOT_SENT.has(server.status));
  for (const server of rows) {
    if (server.status === "failed") servers.push({ name: server.name, why: `failed: ${server.explanation}` });
    else if (noneSent) servers.push({ name: server.name, why: server.explanation });
    else if (server.status === "delivered" && server.builtin) {
      const at = instant(server.steps.find((s) => s.step === "delivered")?.at);
      if (at !== null && now - at > DELIVERED_GRACE_MS) {
        waiting.push({ name: server.name, why: `not contacted yet (${ago(now - at)})` });
      }
    }
  }
  const sessionError = Boolean(attempt?.session_error);
  return { servers, waiting, noneSent, sessionError, needs: servers.length > 0 || sessionError };
}

export function attentionText(found) {
  if (found.noneSent) return "no server was sent to the agent";
  const n = found.servers.length;
  if (n) return n === 1 ? "1 server needs attention" : `${n} servers need attention`;
  return found.sessionError ? "session error" : "no server needs attention";
}

export const FILTERS = [
  ["all", "All sessions"], ["attention", "Needs attention"], ["connected", "Daemon connected"],
  ["disconnected", "Daemon not connected"], ["failed", "With a failed server"], ["delivered", "With a delivered server"],
  ["active", "With an active server"], ["filtered", "With a filtered server"],
  ["unavailable", "With an unavailable server"], ["blocked", "Blocked on a required server"],
];
