// @ts-check
// JSON as a tree: objects and arrays fold (the first level open, deeper ones open while they
// are small), long strings and long lists are cut with a "show all" button, and a copy button
// copies the whole value as indented JSON. Paths given as marks (JSON pointers) are highlighted,
// and the nodes that lead to them open.

import { h } from "./dom.js";

/** Strings longer than this are cut; lists longer than LIST show their first LIST items. */
const TEXT = 300;
const LIST = 25;
/** A nested object or list is open at first when it has at most this many entries. */
const SMALL = 6;

/** The tree of `value`, with a copy button. `label`: what the copy button copies (for its
 * accessible name); `marks`: JSON pointers to highlight (`""`, the whole value).
 * @param {unknown} value @param {string} [label] @param {{ marks?: string[] }} [options] */
export function jsonTree(value, label = "the value", { marks = [] } = {}) {
  const copy = h("button", { type: "button", class: "button small ghost json-copy", title: `Copy ${label} as JSON`, "aria-label": `Copy ${label} as JSON` }, "Copy");
  copy.addEventListener("click", async () => {
    const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    try {
      await copyText(text);
      copy.textContent = "Copied";
      copy.dataset.copied = "1";
    } catch {
      copy.textContent = "Copy failed: select the text";
    }
    setTimeout(() => {
      copy.textContent = "Copy";
      delete copy.dataset.copied;
    }, 1500);
  });
  const marked = new Set(marks);
  return h("div", { class: ["json-tree", marked.has("") && "j-diff"], dataset: marked.has("") ? { path: "" } : {} }, copy, node(value, 0, "", marked));
}

/** A key of a JSON pointer, escaped. */
function pointerKey(k) {
  return String(k).replaceAll("~", "~0").replaceAll("/", "~1");
}

/** Whether a marked path is at or under `path`. */
function leadsToMark(path, marked) {
  for (const m of marked) if (m === path || m.startsWith(`${path}/`)) return true;
  return false;
}

async function copyText(text) {
  if (navigator.clipboard?.writeText) {
    await navigator.clipboard.writeText(text);
    return;
  }
  // Without the clipboard API (a page not served over https or localhost): a selection.
  const area = h("textarea", { class: "sr-only", "aria-hidden": "true" });
  area.value = text;
  document.body.append(area);
  area.select();
  const done = document.execCommand("copy");
  area.remove();
  if (!done) throw new Error("copy refused");
}

function node(v, depth, path = "", marked = new Set()) {
  if (v === null || typeof v !== "object") return leaf(v);
  const list = Array.isArray(v);
  const entries = list ? v.map((x, i) => [i, x]) : Object.entries(v);
  if (!entries.length) return h("span", { class: "j-punct" }, list ? "[]" : "{}");
  const summary = h(
    "summary",
    {},
    h("span", { class: "j-punct" }, list ? "[" : "{"),
    h("span", { class: "j-count" }, list ? `${entries.length} item${entries.length === 1 ? "" : "s"}` : `${entries.length} key${entries.length === 1 ? "" : "s"}`),
    h("span", { class: "j-punct" }, list ? "]" : "}"),
  );
  const body = h("ul", { class: "j-body" });
  const show = (upTo) => {
    body.replaceChildren(
      ...entries.slice(0, upTo).map(([k, x]) => {
        const at = `${path}/${pointerKey(k)}`;
        const mark = marked.has(at);
        return h("li", mark ? { class: "j-diff", dataset: { path: at } } : {}, h("span", { class: list ? "j-index" : "j-key" }, list ? `${k}` : JSON.stringify(k)), h("span", { class: "j-punct" }, ": "), node(x, depth + 1, at, marked));
      }),
    );
    if (upTo < entries.length) {
      const more = h("button", { type: "button", class: "button small j-more" }, `show all ${entries.length}`);
      more.addEventListener("click", () => show(entries.length));
      body.append(h("li", {}, h("span", { class: "faint" }, `… ${entries.length - upTo} more `), more));
    }
  };
  // A marked entry past the first LIST is shown from the start.
  const lastMarked = marked.size ? entries.reduce((n, [k], i) => (leadsToMark(`${path}/${pointerKey(k)}`, marked) ? i + 1 : n), 0) : 0;
  show(Math.min(entries.length, Math.max(LIST, lastMarked)));
  return h("details", { class: "j-node", open: depth === 0 || entries.length <= SMALL || (marked.size > 0 && leadsToMark(path, marked)) }, summary, body);
}

function leaf(v) {
  if (typeof v !== "string") return h("span", { class: `j-${v === null ? "null" : typeof v}` }, JSON.stringify(v) ?? String(v));
  const whole = JSON.stringify(v);
  if (whole.length <= TEXT) return h("span", { class: "j-string" }, whole);
  const span = h("span", { class: "j-string" }, `${whole.slice(0, TEXT)}…`);
  const more = h("button", { type: "button", class: "button small j-more" }, `show all ${v.length.toLocaleString()} characters`);
  more.addEventListener("click", () => {
    span.textContent = whole;
    more.remove();
  });
  return h("span", {}, span, " ", more);
}
