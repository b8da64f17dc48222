// The page's shared state and its few helpers: the token's API calls, the live line, the toast. Every other
// module reads and changes `state`; what signs out on a refused token is app.js's (`state.signOut`).
export const TOKEN_KEY = "agentctl-hub-token";
export const coarse = matchMedia("(pointer: coarse)");
export const $ = (id) => document.getElementById(id);

export const state = {
  token: null,
  sessions: new Map(), // session_id -> session view, the loaded window only
  rows: new Map(), // session_id -> {li, trigger, panel, wrap, nav}
  order: [], // the window's session ids, in the hub's order
  open: null, // {sid, pinned, drawer}
  outputWarning: "",
  terminalWarning: "",
  closeTimer: null,
  noFocusOpen: null, // a trigger that must not reopen on focus (after Escape or a closing click)
  gen: 0, // one sign-in: a new token ends the previous one's update stream
  abort: null,
  skew: 0, // the hub's clock minus this browser's, so "delivered for N minutes" does not depend on either
  arrangeLater: false, // rows do not move under an open panel: the window is reloaded when it closes
  signOut: null, // (refused) => void, set by app.js
  onClosed: null, // () => void: a panel closed (list.js reloads the window it held still)
};
export const now = () => Date.now() + state.skew;

export async function api(path, { method = "GET", body } = {}) {
  const headers = { Authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, cache: "no-store", credentials: "omit",
    body: body === undefined ? undefined : JSON.stringify(body) });
  if (resp.status === 401) { state.signOut?.(true); throw new Error("the hub token is missing or wrong"); }
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(data.error || `the hub answered HTTP ${resp.status}`);
  return data;
}

export const sid$ = (sid) => encodeURIComponent(sid);
export const setLive = (text) => { $("live").textContent = text; };

export function toast(text) {
  const t = $("toast");
  t.textContent = text;
  t.classList.add("shown");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => t.classList.remove("shown"), 4000);
}
