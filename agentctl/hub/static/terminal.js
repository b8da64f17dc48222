// The agent's terminal in a panel: read-only xterm.js (vendored, loaded the first time a terminal is shown),
// restyled through CSSOM so the page keeps its strict CSP. Nothing of a screen outlives the panel.
import { el, terminalScreen } from "/views.js";
import { api, sid$, state } from "/state.js";

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

export function dropTerminal(row) {
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

export async function showTerminal(sid, out, button) {
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
