// @ts-check
// Small helpers: building elements, formatting times, money and JSON.

/** An element: h("div", {class: "x", onclick: f}, child, "text", [more children]). */
export function h(tag, attrs = {}, ...children) {
  const svg = tag.startsWith("svg:");
  const el = svg
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") {
      el.addEventListener(k.slice(2), v);
    } else if (k === "class") {
      el.setAttribute("class", Array.isArray(v) ? v.filter(Boolean).join(" ") : v);
    } else if (k === "dataset") {
      for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = dv;
    } else if (k === "value" && !svg) {
      el.value = v;
    } else if (v === true) {
      el.setAttribute(k, "");
    } else {
      el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** Appends children as `h` takes them (null, undefined and false are left out, arrays are
 * flattened), where the DOM's own `append` would write "undefined" or "false". */
export function add(el, ...children) {
  append(el, children);
  return el;
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/**
 * Renders `part` into `el` only when `data` changed since the last time, so that live updates
 * leave untouched what a person is reading, typing into or has focused.
 */
export function renderIfChanged(el, data, part) {
  const sig = JSON.stringify(data ?? null);
  if (SIGS.get(el) === sig) return false;
  SIGS.set(el, sig);
  fill(el, part(data));
  return true;
}

/** What each element was last rendered from (kept off the DOM: a signature can be large). */
const SIGS = new WeakMap();

/** The element made for each item of a keyed list, with the signature it was made from. */
const KEYED = new WeakMap();

/**
 * Makes `el`'s children one element per item, in order: an item whose signature did not change
 * keeps its element, so a live list redraws (and the browser lays out again) only what changed.
 * @template T
 * @param {HTMLElement} el a container holding nothing but the list
 * @param {T[]} items
 * @param {(item: T) => string | number} key
 * @param {(item: T) => unknown} sigOf what the item's element is made from
 * @param {(item: T) => Element} make
 */
export function keyedList(el, items, key, sigOf, make) {
  /** @type {Map<string | number, {sig: string, node: Element}>} */
  const had = KEYED.get(el) ?? new Map();
  const now = new Map();
  const nodes = items.map((item) => {
    const k = key(item);
    const sig = JSON.stringify(sigOf(item) ?? null);
    const old = had.get(k);
    const kept = old && old.sig === sig ? old : { sig, node: make(item) };
    now.set(k, kept);
    return kept.node;
  });
  KEYED.set(el, now);
  const keep = new Set(nodes);
  for (const c of [...el.children]) if (!keep.has(c)) c.remove();
  nodes.forEach((node, i) => {
    if (el.children[i] !== node) el.insertBefore(node, el.children[i] ?? null);
  });
}

/** "12 s ago", "4 min ago", "3 h ago", "2 d ago". */
export function age(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "";
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

/** A time for a title: the local date and time. */
export function when(iso) {
  const t = new Date(iso);
  return Number.isNaN(t.getTime()) ? "" : t.toLocaleString();
}

/** "850 ms", "2.4 s", "3 min 5 s". */
export function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 1 : 0)} s`;
  const m = Math.floor(ms / 60000);
  return `${m} min ${Math.round((ms % 60000) / 1000)} s`;
}

/** "1,234" / "12.3k". */
export function count(n) {
  if (!n) return "0";
  if (n < 10000) return n.toLocaleString();
  return `${(n / 1000).toFixed(1)}k`;
}

/** "$0.0123", or "" when the model's prices are not known. */
export function cost(usd) {
  if (usd === null || usd === undefined) return "";
  if (usd === 0) return "$0";
  return usd < 0.01 ? `$${usd.toFixed(4)}` : `$${usd.toFixed(2)}`;
}

/**
 * Tokens and cost of a usage record, e.g. "1,204 in · 310 out · $0.0021".
 * @param {import("./api-types").components["schemas"]["Usage"] | null | undefined} u
 */
export function usageText(u) {
  if (!u) return "";
  const parts = [`${count(u.input_tokens)} in`, `${count(u.output_tokens)} out`];
  const c = cost(u.cost_usd);
  if (c) parts.push(c);
  return parts.join(" · ") + (u.usage_estimated ? " (estimated)" : "");
}

/**
 * What was spent against a limit: "$0.12 of $5", "1,204 of 10,000".
 * @param {string} key the measure (`cost_usd` is money, the rest are counts)
 * @param {number} spent
 * @param {number} limit
 */
export function spentOf(key, spent, limit) {
  const show = key === "cost_usd" ? (/** @type {number} */ n) => cost(n) || "$0" : count;
  return `${show(spent)} of ${show(limit)}`;
}

/** JSON for people: strings as they are, the rest indented. */
export function pretty(v) {
  if (typeof v === "string") return v;
  try {
    return JSON.stringify(v, null, 2);
  } catch {
    return String(v);
  }
}

/** One line of text, cut with an ellipsis. */
export function cut(text, n) {
  const s = typeof text === "string" ? text : JSON.stringify(text ?? "");
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

/** Where a JSON.parse error points, as "line L, column C: message". */
export function jsonError(text, err) {
  const m = /position (\d+)/.exec(err.message);
  const lineCol = /line (\d+) column (\d+)/.exec(err.message);
  let where = "";
  if (lineCol) {
    where = `line ${lineCol[1]}, column ${lineCol[2]}`;
  } else if (m) {
    const pos = Number(m[1]);
    const before = text.slice(0, pos);
    const line = before.split("\n").length;
    const col = pos - before.lastIndexOf("\n");
    where = `line ${line}, column ${col}`;
  }
  const msg = err.message.replace(/^JSON\.parse: /, "").replace(/ in JSON at position \d+.*$/, "");
  return where ? `${where}: ${msg}` : msg;
}

/** Tells screen readers what changed. */
export function announce(text) {
  const el = document.getElementById("announce");
  if (el) el.textContent = text;
}

/** Whether a key press happened while typing text (shortcuts then do nothing; on a slider, a
 * checkbox or a button they work). */
export function typing(e) {
  const t = e.target;
  if (!(t instanceof HTMLElement)) return false;
  if (t.isContentEditable || t.tagName === "TEXTAREA" || t.tagName === "SELECT") return true;
  return t instanceof HTMLInputElement && !["range", "checkbox", "radio", "button", "submit"].includes(t.type);
}
