// @ts-check
// What a person does for a session that waits: answer its question, approve or deny a tool call,
// approve, reject or edit a plan (the edit is checked by the server before it can be sent), or
// continue a paused run. Every answer is a run of the thread with `command: {resume: text}`, as
// a LangGraph client answers an interrupt.

import { api } from "./api.js";
import { h, add, pretty, jsonError, announce } from "./dom.js";
import { sayApiError } from "./errors.js";

/** @typedef {import("./api-types").components["schemas"]["SessionView"]} SessionView */
/** @typedef {import("./api-types").components["schemas"]["Checked"]} Checked */
/** A call waiting for approval or input (`InputRequest.partial_call`, untyped in the API). @typedef {{ tool?: string, arguments?: unknown }} PartialCall */

const TITLES = {
  question: "The agent asks",
  missing_input: "A tool call needs more input",
  tool_approval: "Approve this tool call?",
  plan_approval: "Approve this plan?",
  paused: "Paused",
};

/**
 * The panel for `view.waiting`; `done()` is called once an answer was accepted.
 * @param {SessionView} view
 * @param {() => void} done
 */
export function waitingPanel(view, done) {
  const w = view.waiting;
  if (!w) return null;
  const partial = /** @type {PartialCall | null | undefined} */ (w.partial_call);
  const status = h("div", { class: "problems", role: "alert" });
  const busy = (on, ...buttons) => buttons.forEach((b) => b && (b.disabled = on));
  const send = async (text, ...buttons) => {
    busy(true, ...buttons);
    status.textContent = "";
    try {
      await api(`/threads/${encodeURIComponent(view.id)}/runs`, {
        method: "POST",
        body: { assistant_id: view.agent, command: { resume: text } },
      });
      announce("Answer sent; the run goes on.");
      done();
    } catch (e) {
      status.textContent = sayApiError(e, "The answer was not sent");
      busy(false, ...buttons);
    }
  };

  const title = h("h2", { id: "waiting-title" }, TITLES[w.kind] || "Waiting for you");
  const question = h("p", { class: "question" }, w.question);
  const panel = h("section", { class: ["alert", w.kind === "paused" ? "info" : "warn"], id: "waiting", "aria-labelledby": "waiting-title", dataset: { kind: w.kind } }, title);

  if (w.kind === "paused") {
    const go = h("button", { type: "button", class: "button primary", dataset: { act: "continue" } }, "Continue");
    go.addEventListener("click", () => send("continue", go));
    add(panel, h("p", {}, "The run stopped at a safe point: calls in flight finished and were recorded, nothing new starts until you continue."), h("div", { class: "actions" }, go), status);
    return panel;
  }

  if (w.kind === "tool_approval") {
    const call = partial || {};
    const reason = h("input", { type: "text", id: "deny-reason", placeholder: "Why not? (the agent is told)", "aria-label": "Reason for denying the call" });
    const yes = h("button", { type: "button", class: "button ok", dataset: { act: "approve" } }, "Approve");
    const no = h("button", { type: "button", class: "button danger", dataset: { act: "deny" } }, "Deny");
    yes.addEventListener("click", () => send("approve", yes, no));
    no.addEventListener("click", () => send(reason.value.trim() ? `deny: ${reason.value.trim()}` : "deny", yes, no));
    add(
      panel,
      h("p", {}, h("code", {}, call.tool || w.tool || "the tool"), w.step ? ` in step ${w.step}` : "", " wants to run with:"),
      h("pre", {}, pretty(call.arguments ?? {})),
      h("div", { class: "row approve-row" }, yes, no, reason),
      status,
    );
    return panel;
  }

  if (w.kind === "plan_approval") {
    const yes = h("button", { type: "button", class: "button ok", dataset: { act: "approve" } }, "Approve plan");
    const no = h("button", { type: "button", class: "button danger", dataset: { act: "reject" } }, "Reject (ends the run)");
    const edit = h("button", { type: "button", class: "button", dataset: { act: "edit" }, "aria-expanded": "false", "aria-controls": "plan-editor" }, "Edit plan…");
    const editor = planEditor(view, (text, button) => send(text, button, yes, no, edit));
    editor.hidden = true;
    yes.addEventListener("click", () => send("approve", yes, no, edit));
    no.addEventListener("click", () => send("reject", yes, no, edit));
    edit.addEventListener("click", () => {
      editor.hidden = !editor.hidden;
      edit.setAttribute("aria-expanded", String(!editor.hidden));
      if (!editor.hidden) editor.querySelector("textarea").focus();
    });
    add(
      panel,
      h("p", {}, `The agent proposes ${w.plan?.length ?? 0} steps, drawn below in the waves they would run in. Approve them, reject them (the run ends), or edit them.`),
      // The agent's own words, when they say more than the buttons do (an edit it refused).
      !w.question.startsWith("Approve this plan?") && h("div", { class: "callout" }, w.question),
      h("div", { class: "actions" }, yes, no, edit),
      editor,
      status,
    );
    return panel;
  }

  // A question, or input a tool call lacks.
  const text = h("textarea", { id: "answer-text", rows: 3, "aria-labelledby": "waiting-title", placeholder: "Your answer" });
  const go = h("button", { type: "button", class: "button primary", dataset: { act: "send" } }, "Send answer");
  const submit = () => {
    if (!text.value.trim()) {
      status.textContent = "Write an answer first.";
      text.focus();
      return;
    }
    send(text.value.trim(), go);
  };
  go.addEventListener("click", submit);
  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      submit();
    }
  });
  add(
      panel,
    question,
    w.missing && w.missing.length > 0 && h("p", { class: "muted", id: "waiting-missing" }, `Missing: ${w.missing.join(", ")}${partial?.tool ? ` for ${partial.tool}` : ""}`),
    text,
    h("div", { class: "row" }, go, h("span", { class: "muted" }, h("span", { class: "kbd" }, "Ctrl"), "+", h("span", { class: "kbd" }, "Enter"), " sends")),
    status,
  );
  return panel;
}

/**
 * The editor of a plan waiting for approval: JSON, checked as it is typed.
 * @param {SessionView} view
 * @param {(text: string, button: HTMLElement) => void} send
 */
function planEditor(view, send) {
  const area = h("textarea", {
    class: "code",
    id: "plan-json",
    rows: 14,
    spellcheck: "false",
    "aria-label": "The plan as JSON",
    "aria-describedby": "plan-check",
  });
  area.value = pretty(view.waiting?.plan || []);
  const result = h("div", { id: "plan-check", class: "problems", "aria-live": "polite" });
  const go = h("button", { type: "button", class: "button primary", dataset: { act: "send-plan" }, disabled: true }, "Send edited plan");
  let checked = null;
  let timer = 0;
  let seq = 0;
  const check = async () => {
    const mine = ++seq;
    checked = null;
    go.disabled = true;
    let plan;
    try {
      plan = JSON.parse(area.value);
    } catch (e) {
      result.className = "problems";
      result.replaceChildren(h("li", {}, `Not JSON: ${jsonError(area.value, e)}`));
      return null;
    }
    try {
      /** @type {Checked} */
      const r = await api(`/sessions/${encodeURIComponent(view.id)}/plan/check`, { method: "POST", body: { plan } });
      if (mine !== seq) return null;
      if (r.ok) {
        result.className = "problems ok";
        const waves = (r.waves || []).map((w) => `wave ${w.wave}: ${w.steps.map((s) => s.id).join(", ")}`).join("; ");
        result.replaceChildren(h("li", {}, `✓ Valid: ${(r.plan || []).length} steps (${waves}).`));
        checked = area.value;
        go.disabled = false;
      } else {
        result.className = "problems";
        result.replaceChildren(
          ...r.problems.map((p) =>
            h("li", {}, [p.step && `step ${p.step}`, p.field && `field ${p.field}`].filter(Boolean).join(", ") + (p.step || p.field ? ": " : "") + p.message),
          ),
        );
      }
      return r;
    } catch (e) {
      result.className = "problems";
      result.replaceChildren(h("li", {}, sayApiError(e, "The plan could not be checked")));
      return null;
    }
  };
  area.addEventListener("input", () => {
    clearTimeout(timer);
    go.disabled = true;
    timer = setTimeout(check, 300);
  });
  go.addEventListener("click", async () => {
    // Never send what was not checked as it stands.
    if (checked !== area.value) {
      const r = await check();
      if (!r || !r.ok) return;
    }
    send(JSON.stringify(JSON.parse(area.value)), go);
  });
  check();
  return h(
    "div",
    { id: "plan-editor", class: "stack plan-editor" },
    h("label", { for: "plan-json" }, "Edited plan (JSON: an array of calls). It is checked against the agent's tools as you type."),
    area,
    result,
    h("div", { class: "actions" }, go),
  );
}
