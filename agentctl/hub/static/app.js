// The hub page: sign-in with the hub's token, the live update stream (server-sent events read with fetch, so the
// token stays in a header) and the start. The session list is list.js's, the MCP panel panel.js's; text only,
// built by views.js.
import { GRACE_TEXT, FILTERS, el, instant } from "/views.js";
import { $, TOKEN_KEY, setLive, state } from "/state.js";
import { close } from "/panel.js";
import { changed, clear, load, refreshAttention, reloadSoon, wireControls } from "/list.js";

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
  clear();
  $("controls").hidden = true;
  $("empty").hidden = true;
  $("no-match").hidden = true;
  $("more").hidden = true;
  $("token-refused").hidden = !refused;
  $("token-title").textContent = refused ? "The hub refused this token" : "This page needs the hub's token";
  $("token-needed").hidden = false;
  setLive(refused ? "not signed in: token refused" : "not signed in");
  $("token-input").focus();
}
state.signOut = needToken;

// ---- live updates ----------------------------------------------------------------------------------

function applyStatus(status) {
  const hubNow = instant(status.generated_at);
  if (hubNow !== null) state.skew = hubNow - Date.now();
  state.outputWarning = status.output_warning;
  state.terminalWarning = status.terminal_warning;
}

function handleEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  if (!data.length) return;
  const payload = JSON.parse(data.join("\n"));
  if (event === "status") { applyStatus(payload); reloadSoon(); } // (re)connected: updates may have been missed
  else if (event === "session") changed(payload);
  else if (event === "changed") reloadSoon(); // sessions the hub holds only in its database changed
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

// ---- start -----------------------------------------------------------------------------------------

$("backdrop").addEventListener("click", () => close({ focus: true }));
$("filter").replaceChildren(...FILTERS.map(([value, label]) => el("option", { value, text: label })));
wireControls();
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
    const first = await load();
    if (gen !== state.gen) return;
    if (first) applyStatus(first);
  } catch (err) {
    if (gen !== state.gen || !state.token) return;
    setLive(err.message);
  }
  listen(gen, abort.signal);
}

// An address with #token=… pasted into the open page changes only the fragment: sign in with it, no reload.
window.addEventListener("hashchange", () => { if (/(?:^#|&)token=/.test(location.hash)) start(); });

start();
