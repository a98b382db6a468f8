// @ts-check
// The playground's entry: signing in with an API key, the routes of the page (#/ the sessions,
// #/s/ID a session, #/new a new run, #/evals the eval runs, #/evals/ID one run,
// #/evals/A/compare/B two runs, #/compare/A/B two sessions), keyboard shortcuts and the
// narrow-window sidebar.

import { api, apiKey, signIn, signOut, ApiError } from "./api.js";
import { h, fill, typing, cost, count, spentOf } from "./dom.js";
import { sayApiError } from "./errors.js";
import { SessionList } from "./sessions.js";
import { SessionPage } from "./session.js";
import { startPage } from "./start.js";
import { EvalsPage } from "./evals.js";
import { ComparePage } from "./compare.js";

/** @typedef {import("./api-types").components["schemas"]["Agents"]} Agents */
/** @typedef {import("./api-types").components["schemas"]["AgentInfo"]} AgentInfo */
/** @typedef {import("./api-types").components["schemas"]["MeUsage"]} MeUsage */

/**
 * An element of index.html the page cannot work without.
 * @param {string} id
 * @returns {HTMLElement}
 */
function part(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error(`index.html has no element #${id}; the playground cannot start`);
  return el;
}

const main = part("main");
const sidebar = part("sidebar");
const conn = part("conn");
const toggle = part("toggle-sessions");
const signOutButton = part("sign-out");
const whoami = part("whoami");
const evalsLink = part("evals-link");
const myUsage = part("my-usage");
/** @type {ReturnType<typeof setInterval> | null} */
let usageTimer = null;

/** @type {AgentInfo[]} */
let agents = [];
let list = null;
let page = null;
/** @type {EvalsPage | null} */
let evalsPage = null;
/** @type {ComparePage | null} */
let comparePage = null;

function setConn(text) {
  conn.textContent = text === "live" ? "● live" : text;
  conn.classList.toggle("bad", text !== "live" && text !== "");
}

function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function openSidebar(open) {
  sidebar.classList.toggle("open", open);
  toggle.setAttribute("aria-expanded", String(open));
  if (open) /** @type {HTMLElement | null} */ (sidebar.querySelector("button, a, select"))?.focus();
}

toggle.addEventListener("click", () => openSidebar(!sidebar.classList.contains("open")));

function showSignIn(message) {
  page?.destroy();
  page = null;
  evalsPage?.destroy();
  evalsPage = null;
  comparePage?.destroy();
  comparePage = null;
  list?.stop();
  list = null;
  fill(sidebar);
  signOutButton.hidden = true;
  whoami.textContent = "";
  stopUsage();
  const key = h("input", { type: "password", id: "api-key", autocomplete: "current-password", required: true, "aria-describedby": "signin-help" });
  const remember = h("input", { type: "checkbox", id: "remember" });
  const status = h("div", { class: "problems", role: "alert" }, message || "");
  const form = h(
    "form",
    { class: "panel signin", id: "signin" },
    h("div", { class: "panel-head" }, h("h1", {}, "Sign in to weft serve")),
    h(
      "div",
      { class: "panel-body" },
      h("div", { class: "field" }, h("label", { for: "api-key" }, "API key"), key, h("p", { class: "field-help", id: "signin-help" }, "A key from the server's --keys file or WEFT_API_KEYS. It is sent with every request as x-api-key and kept in this tab only, unless you tick the box.")),
      h("div", { class: "field" }, h("label", { class: "check" }, remember, "Remember it on this browser")),
      h("button", { type: "submit", class: "button primary", id: "signin-submit" }, "Sign in"),
      status,
    ),
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!key.value.trim()) {
      status.textContent = "Enter an API key.";
      key.focus();
      return;
    }
    signIn(key.value.trim(), remember.checked);
    await boot();
  });
  fill(main, form);
  key.focus();
}

const REFUSED = "The server refused the API key. Enter a valid one.";

window.addEventListener("weft:unauthorized", () => {
  // Already signed out (a request that left before): the form and what is typed in it stay.
  // (A key refused at sign-in is said by `boot`.)
  if (!list && document.getElementById("signin")) return;
  signOut();
  showSignIn(REFUSED);
});

signOutButton.addEventListener("click", () => {
  signOut();
  showSignIn("Signed out.");
});

async function boot() {
  if (!apiKey()) {
    showSignIn();
    return;
  }
  /** @type {Agents} */
  let got;
  try {
    got = await api("/agents");
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      // The key was refused: it is forgotten, and the sign-in form (what is typed stays) says so.
      signOut();
      const status = document.querySelector("#signin .problems");
      if (status) status.textContent = REFUSED;
      return;
    }
    fill(
      main,
      h(
        "div",
        { class: "alert bad", role: "alert" },
        h("h2", {}, "The playground cannot start"),
        h("p", {}, sayApiError(e, "Listing the agents")),
        h("button", { type: "button", class: "button", onclick: () => boot() }, "Try again"),
      ),
    );
    return;
  }
  agents = got.agents;
  whoami.textContent = got.user ? `signed in as ${got.user}` : "";
  startUsage();
  signOutButton.hidden = false;
  list?.stop();
  list = new SessionList(sidebar, agents);
  list.start();
  route();
}

function route() {
  if (!list) return;
  page?.destroy();
  page = null;
  evalsPage?.destroy();
  evalsPage = null;
  comparePage?.destroy();
  comparePage = null;
  setConn("");
  openSidebar(false);
  const hash = location.hash || "#/";
  if (hash.startsWith("#/evals")) evalsLink.setAttribute("aria-current", "page");
  else evalsLink.removeAttribute("aria-current");
  const ev = /^#\/evals(?:\/([^/]+)(?:\/compare\/([^/]+))?)?\/?$/.exec(hash);
  if (ev) {
    list.select(null);
    const [a, b] = [ev[1], ev[2]].map((x) => (x === undefined ? undefined : decodeURIComponent(x)));
    evalsPage = new EvalsPage(main, b === undefined ? { run: a } : { a, b }, go);
    evalsPage.mount();
    return;
  }
  const cmp = /^#\/compare\/([^/]+)\/([^/]+)\/?$/.exec(hash);
  if (cmp) {
    list.select(null);
    comparePage = new ComparePage(main, decodeURIComponent(cmp[1]), decodeURIComponent(cmp[2]));
    comparePage.mount();
    return;
  }
  const m = /^#\/s\/(.+)$/.exec(hash);
  if (m) {
    const id = decodeURIComponent(m[1]);
    list.select(id);
    page = new SessionPage(main, id, { go, setConn });
    page.mount();
    return;
  }
  list.select(null);
  if (hash === "#/new") {
    startPage(main, agents, go);
    return;
  }
  fill(
    main,
    h(
      "div",
      { class: "welcome" },
      h("h1", { tabindex: -1 }, "Sessions"),
      h("p", {}, "Choose a session to watch its plan run, or start a new run."),
      h("p", {}, h("a", { class: "button primary", href: "#/new" }, "New run")),
      h(
        "p",
        { class: "muted" },
        "Keys: ",
        h("span", { class: "kbd" }, "n"),
        " new run · ",
        h("span", { class: "kbd" }, "e"),
        " eval runs · ",
        h("span", { class: "kbd" }, "s"),
        " sessions · ",
        h("span", { class: "kbd" }, "["),
        " ",
        h("span", { class: "kbd" }, "]"),
        " previous / next event · ",
        h("span", { class: "kbd" }, "l"),
        " back to live",
      ),
    ),
  );
}

// A bug of the page itself is said, never left as a blank or frozen page.
function pageBug(what) {
  const box = h(
    "div",
    { class: "alert bad banner-error", role: "alert" },
    h("b", {}, "The playground hit a problem: "),
    String(what),
    " ",
    h("button", { type: "button", class: "button small", onclick: () => location.reload() }, "Reload"),
  );
  main.prepend(box);
}
window.addEventListener("error", (e) => pageBug(e.message));
window.addEventListener("unhandledrejection", (e) => pageBug(e.reason?.message || e.reason));

window.addEventListener("hashchange", route);
window.addEventListener("weft:session-changed", () => list?.refresh());

document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && sidebar.classList.contains("open")) {
    openSidebar(false);
    toggle.focus();
    return;
  }
  if (typing(e) || e.ctrlKey || e.metaKey || e.altKey || !list) return;
  if (e.key === "n") {
    e.preventDefault();
    go("#/new");
  } else if (e.key === "e") {
    e.preventDefault();
    go("#/evals");
  } else if (e.key === "s") {
    e.preventDefault();
    if (getComputedStyle(toggle).display !== "none") openSidebar(true);
    else /** @type {HTMLElement | null} */ (sidebar.querySelector(".session-item, button"))?.focus();
  } else if (page && e.key === "[") {
    page.step(-1);
  } else if (page && e.key === "]") {
    page.step(1);
  } else if (page && e.key === "l") {
    page.setAt(null);
  }
});

boot();

/** What the signed-in user spent today and this month, against their quota (`GET /me/usage`). */
async function showUsage() {
  /** @type {MeUsage} */
  let u;
  try {
    u = await api("/me/usage");
  } catch {
    myUsage.textContent = "";
    return;
  }
  const names = { day: "today", month: "this month" };
  let over = false;
  const parts = u.periods.map((p) => {
    const limits = /** @type {Record<string, number | null | undefined>} */ (p.limits);
    const spent = {
      cost_usd: p.used.cost_usd,
      tokens: p.used.input_tokens + p.used.output_tokens,
      input_tokens: p.used.input_tokens,
      output_tokens: p.used.output_tokens,
    };
    const shown = Object.entries(spent)
      .filter(([k]) => typeof limits[k] === "number")
      .map(([k, n]) => {
        const limit = /** @type {number} */ (limits[k]);
        if (n >= limit) over = true;
        return `${spentOf(k, n, limit)}${k === "cost_usd" ? "" : ` ${k.replace("_", " ")}`}`;
      });
    if (!shown.length) shown.push(cost(p.used.cost_usd) || `${count(p.used.input_tokens + p.used.output_tokens)} tokens`);
    return `${names[p.period] || p.period} ${shown.join(", ")}`;
  });
  myUsage.textContent = u.quota ? `quota: ${parts.join(" · ")}` : `spent ${parts.join(" · ")}`;
  myUsage.title = u.periods.map((p) => `${p.key} resets ${new Date(p.resets_at).toISOString()}`).join("\n");
  myUsage.classList.toggle("over", over);
}

function startUsage() {
  stopUsage();
  showUsage();
  usageTimer = setInterval(showUsage, 5000);
}

function stopUsage() {
  if (usageTimer) clearInterval(usageTimer);
  usageTimer = null;
  myUsage.textContent = "";
}
