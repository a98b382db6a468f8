// @ts-check
// The HTTP API of `weft serve`, called with the API key the person signed in with. The page uses
// the same routes as any client (see /openapi.json): LangGraph's for runs and answers, weft's
// own (/sessions, /agents) for the rest.

const KEY = "weft.apiKey";

export function apiKey() {
  return sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || "";
}

export function signIn(key, remember) {
  sessionStorage.setItem(KEY, key);
  if (remember) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

export function signOut() {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
}

/** A refused or failed request: its status (0 when the server could not be reached) and why. */
export class ApiError extends Error {
  /** @param {number} status @param {string} detail @param {string} path */
  constructor(status, detail, path) {
    super(detail);
    this.status = status;
    this.detail = detail;
    this.path = path;
  }
}

function headers(extra = {}) {
  return { "x-api-key": apiKey(), ...extra };
}

/**
 * Calls a route; resolves to its JSON, rejects with an ApiError that says why. The JSON is `any`:
 * the caller names its type from api-types.d.ts (`@type {SessionView}`), which `tsc` checks.
 * @param {string} path
 * @param {{ method?: string, body?: unknown, signal?: AbortSignal }} [options]
 * @returns {Promise<any>}
 */
export async function api(path, { method = "GET", body, signal } = {}) {
  let res;
  try {
    res = await fetch(path, {
      method,
      signal,
      headers: headers(body === undefined ? {} : { "content-type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    if (e instanceof Error && e.name === "AbortError") throw e;
    throw new ApiError(0, "cannot reach weft serve; is it running? (retrying)", path);
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) {
    const detail = (data && data.detail) || text || res.statusText;
    if (res.status === 401) window.dispatchEvent(new CustomEvent("weft:unauthorized"));
    throw new ApiError(res.status, detail, path);
  }
  return data;
}

/**
 * Follows a server-sent event stream (`GET path`) with the key, reconnecting with the last event
 * id after a dropped connection, so that nothing is lost or repeated. Calls `on[event name]`
 * with the parsed data and the event id; `onstate("live" | "reconnecting")`. Returns a handle
 * whose `close()` stops it.
 */
export function follow(path, on, { after = 0 } = {}) {
  const ctl = new AbortController();
  let last = after;
  let delay = 500;
  const dispatch = (name, data, id) => {
    // A stream closed in the middle of a chunk dispatches nothing more of it.
    if (ctl.signal.aborted) return;
    if (id !== undefined && id !== "") last = Number(id);
    const fn = on[name];
    if (!fn) return;
    let value = data;
    try {
      value = JSON.parse(data);
    } catch {
      /* plain text */
    }
    fn(value, id);
  };
  const run = async () => {
    while (!ctl.signal.aborted) {
      try {
        const res = await fetch(path, {
          signal: ctl.signal,
          headers: headers({ accept: "text/event-stream", "last-event-id": String(last) }),
        });
        if (res.status === 401) {
          window.dispatchEvent(new CustomEvent("weft:unauthorized"));
          return;
        }
        if (!res.ok) {
          const text = await res.text();
          let detail = text;
          try {
            detail = JSON.parse(text).detail || text;
          } catch {
            /* not JSON */
          }
          on.onfatal?.(new ApiError(res.status, detail, path));
          return;
        }
        on.onstate?.("live");
        delay = 500;
        await read(res.body, dispatch);
      } catch (e) {
        if (ctl.signal.aborted) return;
      }
      if (ctl.signal.aborted) return;
      on.onstate?.("reconnecting");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  };
  run();
  return { close: () => ctl.abort() };
}

/** Reads an event stream: lines end with CRLF, LF or CR (a CR at the end of a chunk waits for
 * the next one, which may begin with its LF); a blank line ends an event. */
async function read(body, dispatch) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let name = "";
  let data = [];
  let id;
  const line = (l) => {
    if (l === "") {
      if (data.length) dispatch(name || "message", data.join("\n"), id);
      name = "";
      data = [];
      id = undefined;
      return;
    }
    if (l.startsWith(":")) return;
    const i = l.indexOf(":");
    const field = i < 0 ? l : l.slice(0, i);
    let value = i < 0 ? "" : l.slice(i + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let start = 0;
    for (let i = 0; i < buf.length; i++) {
      const c = buf[i];
      if (c === "\n" || c === "\r") {
        if (c === "\r" && i === buf.length - 1) break;
        line(buf.slice(start, i));
        if (c === "\r" && buf[i + 1] === "\n") i++;
        start = i + 1;
      }
    }
    buf = buf.slice(start);
  }
}
