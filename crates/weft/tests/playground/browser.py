"""The playground driven in headless Chromium through WebDriver (selenium, pinned in
scripts/setup-browser), against a real `weft serve`: one scenario per run.

    browser.py SCENARIO URL KEY DIR [SCREENSHOTS]

DIR is the server's agent directory (the tools append their calls to DIR/calls.log);
SCREENSHOTS, when given, is where the pictures of the docs are written. Each check that holds
prints `ok: <check>`; the first that does not raises, with what the page showed.
"""

import json
import os
import sys
import tempfile
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.support.ui import Select, WebDriverWait

SCENARIO, URL, KEY, DIR = sys.argv[1:5]
SHOTS = sys.argv[5] if len(sys.argv) > 5 else ""


def browser(width=1440, height=1000):
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ["WEFT_TEST_CHROMIUM"]
    for a in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--disable-features=Translate,OptimizationHints,MediaRouter",
        f"--user-data-dir={tempfile.mkdtemp(prefix='weft-chromium-')}",
        f"--window-size={width},{height}",
    ]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(os.environ["WEFT_TEST_CHROMEDRIVER"]), options=opts)
    d.set_page_load_timeout(30)
    return d


D = None


def ok(what):
    print(f"ok: {what}", flush=True)


def wait(cond, what, timeout=30):
    try:
        return WebDriverWait(D, timeout, poll_frequency=0.05).until(lambda d: cond())
    except TimeoutException:
        raise AssertionError(f"timed out waiting for {what}; the page shows:\n{D.find_element(By.TAG_NAME, 'main').text[:3000]}")


def q(css):
    return D.find_elements(By.CSS_SELECTOR, css)


def one(css):
    return wait(lambda: (q(css) or [None])[0], css)


def text(css):
    """The text of the first element matching `css` ("" when there is none), read in the page
    (the page redraws live: an element found earlier may be gone)."""
    return D.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css)


def texts(css):
    """The text of every element matching `css`, read in the page."""
    return D.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)", css)


def click(css):
    """Clicks the element matching `css` as it is now, looking again if it was just redrawn."""
    for _ in range(20):
        try:
            one(css).click()
            return
        except StaleElementReferenceException:
            time.sleep(0.05)
    raise AssertionError(f"{css} kept being redrawn")


def shot(name):
    if SHOTS:
        D.execute_script("document.getElementById('main').scrollTo(0, 0)")
        time.sleep(0.3)
        D.save_screenshot(os.path.join(SHOTS, name))


def calls():
    path = os.path.join(DIR, "calls.log")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sign_in():
    D.get(URL)
    one("#api-key").send_keys(KEY)
    click("#signin-submit")
    one(".filters")


def start(agent, task, inp="{}"):
    D.get(URL + "#/new")
    Select(one("#run-agent")).select_by_value(agent)
    one("#run-task").send_keys(task)
    box = one("#run-input")
    box.clear()
    box.send_keys(inp)
    click("#run-start")
    wait(lambda: "#/s/" in D.current_url, "the session's page")
    return D.current_url.split("#/s/")[1]


def statuses():
    return D.execute_script("return Object.fromEntries([...document.querySelectorAll('.node')].map(n => [n.dataset.step, n.dataset.status]))")


def session_status():
    return D.execute_script("const e = document.getElementById('session-status'); return e ? e.dataset.status : null;")


def api(path):
    """The API as the page calls it (same origin, same key): what the server holds."""
    return D.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {headers: {'x-api-key': arguments[1]}}).then(r => r.json()).then(done, e => done({error: String(e)}));",
        path,
        KEY,
    )


def api_post(path, body):
    """A POST to the API as the page makes it; the answer's JSON."""
    return D.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', headers: {'x-api-key': arguments[1], 'content-type': 'application/json'}, body: JSON.stringify(arguments[2])})"
        ".then(r => r.json()).then(done, e => done({error: String(e)}));",
        path,
        KEY,
        body,
    )


def no_page_errors():
    bad = [l for l in D.get_log("browser") if l["level"] == "SEVERE"]
    assert not bad, f"the page logged errors: {bad}"


# --- Scenarios ---------------------------------------------------------------------------------


def run_and_watch():
    """Start a run from the form; its plan is drawn, its nodes turn running then completed live;
    the answer, usage and cost show; the sessions list picks the session up by itself."""
    sign_in()
    assert "No session yet" in text("#session-list")
    # The list's polls pause while the page is hidden: the new session must come from the
    # start itself, not from a poll.
    D.execute_script("Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'})")
    sid = start("desk", "Refund the last order of customer c-42.", '{"customerId": "c-42", "amount": 50}')
    wait(lambda: q(f'.session-item[data-id="{sid}"]'), "the new session in the list without a poll", 2)
    assert "No session yet" not in text("#session-list"), text("#session-list")
    D.execute_script("delete document.visibilityState")
    ok("a run started from the page is listed at once")
    wait(lambda: statuses().get("customer") == "RUNNING" and statuses().get("orders") == "RUNNING", "both lookups running in wave 1")
    st = statuses()
    assert st.get("refund") == "PENDING" and st.get("tell") == "PENDING", st
    labels = texts(".graph .col-label")
    assert labels and labels[0].upper().startswith("WAVE 1"), labels
    edges = {(e.get_attribute("data-from"), e.get_attribute("data-to")) for e in q(".graph .edge")}
    assert {("customer", "refund"), ("orders", "refund"), ("refund", "tell")} <= edges, edges
    assert q(".graph .edge.order[data-from=refund][data-to=tell]"), "the _dependsOn edge is dashed"
    ok("the plan is drawn by wave with its data and order edges")
    ok("nodes run live")
    shot("playground-running.png")
    seen_refund_running = False
    deadline = time.time() + 30
    while time.time() < deadline:
        st = statuses()
        seen_refund_running |= st.get("refund") == "RUNNING"
        if st and all(v == "COMPLETED" for v in st.values()):
            break
        time.sleep(0.05)
    assert st and all(v == "COMPLETED" for v in st.values()), st
    assert seen_refund_running, "the refund step was never seen running"
    ok("every node turned completed")
    wait(lambda: session_status() == "completed", "the session completed")
    answer = text("#answer")
    assert "Refunded 50 to Ada Lovelace" in answer, answer
    stats = text(".stats")
    assert "$0.0014" in stats, stats
    ok("the answer, usage and cost are shown")
    click('.node[data-step="refund"]')
    wait(lambda: q('#step-details[data-step="refund"] .card.call'), "the refund step's call")
    shot("playground-finished.png")
    # The list found the session by itself (it polls): status, agent, cost.
    wait(lambda: q(f'.session-item[data-id="{sid}"][data-status=completed]'), "the session in the list")
    item = text(f'.session-item[data-id="{sid}"]')
    assert "desk" in item and "$0.0014" in item, item
    ok("the sessions list updates live")
    # Filters: Failed hides it, Completed and its agent show it.
    click('.seg button[data-status="failed"]')
    wait(lambda: not q(f'.session-item[data-id="{sid}"]'), "the failed filter")
    click('.seg button[data-status="completed"]')
    wait(lambda: q(f'.session-item[data-id="{sid}"]'), "the completed filter")
    Select(one("#filter-agent")).select_by_value("asker")
    wait(lambda: not q(f'.session-item[data-id="{sid}"]'), "the agent filter")
    Select(one("#filter-agent")).select_by_value("desk")
    wait(lambda: q(f'.session-item[data-id="{sid}"]'), "the agent filter")
    ok("the list filters by status and agent")
    # The tool calls as cards: tool, arguments, result, duration.
    cards = texts("#activity .card.call")
    assert len(cards) == 4, cards
    shown = " ".join(cards)
    assert "issueRefund" in shown and "r-20931" in shown and "c-42" in shown, shown
    ok("tool call cards show arguments, results and durations")
    # The history's result as a JSON tree: folded, cut, shown whole on request, copied.
    history = next(c for c in q("#activity .card.call") if c.find_element(By.CSS_SELECTOR, ".tool").text == "billingHistory")
    tree = history.find_elements(By.CSS_SELECTOR, ".json-tree")[-1]
    payments = [d for d in tree.find_elements(By.CSS_SELECTOR, "details.j-node") if "40 items" in d.get_attribute("textContent")[:40]]
    assert payments and payments[0].get_attribute("open") is None, "the 40 payments are not folded"
    payments[0].find_element(By.TAG_NAME, "summary").click()
    assert payments[0].get_attribute("open") is not None
    assert len(payments[0].find_elements(By.CSS_SELECTOR, ":scope > ul > li")) == 26, "the first 25 payments and a show-all"
    payments[0].find_element(By.CSS_SELECTOR, ":scope > ul > li > .j-more").click()
    assert len(payments[0].find_elements(By.CSS_SELECTOR, ":scope > ul > li")) == 40
    note = [b for b in tree.find_elements(By.CSS_SELECTOR, ".j-more") if "characters" in b.text]
    assert note, "the long note is not cut"
    note[0].click()
    assert "Paid on time. " * 40 in tree.get_attribute("textContent")
    D.execute_script("window.__copied = null; navigator.clipboard.writeText = (t) => { window.__copied = t; return Promise.resolve(); }")
    tree.find_element(By.CSS_SELECTOR, ".json-copy").click()
    wait(lambda: D.execute_script("return window.__copied"), "the copy")
    copied = json.loads(D.execute_script("return window.__copied"))
    assert len(copied["payments"]) == 40 and copied["last"]["id"] == "o-981", copied
    ok("JSON values fold, long ones show all on request, and copy whole")
    click("#tab-decisions")
    decisions = text("#tab-panel")
    assert "CONTINUE" in decisions and "FINAL_RESPONSE" in decisions and "Plan v1" in decisions, decisions
    ok("the reviews and the plan version are listed")
    no_page_errors()


def answer_question_by_keyboard():
    """On a narrow window, with the keyboard alone: sign in, start a run, answer its question."""
    D.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 380, "height": 820, "deviceScaleFactor": 1, "mobile": True})
    D.get(URL)
    keys = ActionChains(D)
    one("#api-key")
    keys.send_keys(KEY, Keys.ENTER).perform()
    one(".filters")
    # `n` opens the form, the task has the focus.
    ActionChains(D).send_keys("n").perform()
    focused = lambda: D.execute_script("return document.activeElement && document.activeElement.id")
    wait(lambda: focused() == "run-task", "the task focused")
    # Back to the agent, chosen by typing its name (a native select), then the task.
    ActionChains(D).key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(Keys.SHIFT).perform()
    wait(lambda: focused() == "run-agent", "the agent focused")
    ActionChains(D).send_keys("ask").perform()
    wait(lambda: D.execute_script("return document.getElementById('run-agent').value") == "asker", "the agent chosen")
    ActionChains(D).send_keys(Keys.TAB, "Refund customer c1.").perform()
    ActionChains(D).key_down(Keys.CONTROL).send_keys(Keys.ENTER).key_up(Keys.CONTROL).perform()
    wait(lambda: "#/s/" in D.current_url, "the run started")
    one("#waiting[data-kind=missing_input]")
    assert "How much should be refunded?" in text("#waiting")
    ok("the question is shown")

    def tab_to(css, limit=80):
        for _ in range(limit):
            if D.execute_script("return document.activeElement.matches(arguments[0])", css):
                return D.switch_to.active_element
            ActionChains(D).send_keys(Keys.TAB).perform()
        raise AssertionError(f"Tab never reached {css}")

    tab_to("#answer-text")
    ActionChains(D).send_keys("75").key_down(Keys.CONTROL).send_keys(Keys.ENTER).key_up(Keys.CONTROL).perform()
    wait(lambda: session_status() == "completed", "the session completed after the answer")
    assert "Refunded 75 to c1." in text("#answer")
    ok("the question is answered with the keyboard alone")
    width = D.execute_script("const m = document.getElementById('main'); return [Math.max(document.documentElement.scrollWidth, m.scrollWidth), window.innerWidth]")
    assert width[0] <= width[1], f"the page is wider than a narrow window: {width}"
    ok("nothing overflows a narrow window")
    # The sessions drawer opens with the keyboard, and Escape closes it.
    ActionChains(D).send_keys("s").perform()
    wait(lambda: q("#sidebar.open"), "the sessions drawer")
    ActionChains(D).send_keys(Keys.ESCAPE).perform()
    wait(lambda: not q("#sidebar.open"), "the drawer closed")
    # The plan's nodes are reachable and open with Enter.
    node = tab_to('.node[data-step="refund"]')
    node.send_keys(Keys.ENTER)
    wait(lambda: q('#step-details[data-step="refund"]'), "the step's details")
    assert "issueRefund" in text("#step-details")
    ok("a step's details open from the keyboard")
    no_page_errors()


def approve_tool_call():
    sign_in()
    start("approver", "Move 120 to savings.")
    one("#waiting[data-kind=tool_approval]")
    panel = text("#waiting")
    assert "transfer" in panel and "120" in panel, panel
    assert not calls(), "the tool ran before it was approved"
    ok("the tool call waits for approval, with its arguments")
    click("[data-act=approve]")
    wait(lambda: session_status() == "completed", "the session completed")
    assert "Moved 120." in text("#answer")
    ran = [c for c in calls() if c["tool"] == "transfer"]
    assert ran == [{"tool": "transfer", "args": {"amount": 120}}], ran
    ok("the approved call ran once and the agent answered")
    no_page_errors()


def reject_and_edit_plan():
    sign_in()
    # Rejected: the run ends, nothing ran.
    start("gatekeeper", "Refund c-7.")
    one("#waiting[data-kind=plan_approval]")
    wait(lambda: statuses() == {"customer": "PROPOSED", "refund": "PROPOSED"}, "the proposed plan drawn")
    ok("the proposed plan is drawn")
    click("[data-act=reject]")
    wait(lambda: session_status() == "failed", "the rejected session")
    assert "rejected the plan" in text("#failure"), text("#failure")
    assert not calls(), calls()
    ok("a rejected plan ends the run and runs nothing")
    # Edited: a broken edit is caught in the page, an invalid one by the server's check, a
    # valid one is sent and runs instead of the proposed plan.
    start("gatekeeper", "Refund c-7, but only look the customer up.")
    one("#waiting[data-kind=plan_approval]")
    click("[data-act=edit]")
    editor = one("#plan-json")
    send = one("[data-act=send-plan]")
    editor.clear()
    editor.send_keys('[{"_id": "customer", "_tool": "lookupCustomer",')
    wait(lambda: "Not JSON" in text("#plan-check"), "the JSON error")
    assert not send.is_enabled()
    ok("an edit that is not JSON is caught before it is sent")
    editor.clear()
    editor.send_keys('[{"_id": "customer", "_tool": "lookupCustomer", "customerId": "c-7"}, {"_id": "x", "_tool": "wireMoney"}]')
    wait(lambda: "unknown tool `wireMoney`" in text("#plan-check"), "the server's check")
    assert "step x" in text("#plan-check")
    assert not send.is_enabled()
    ok("an invalid edit shows the step, field and problem, and cannot be sent")
    editor.clear()
    editor.send_keys('[{"_id": "customer", "_tool": "lookupCustomer", "customerId": "c-7", "_outputPath": "†state.customer"}]')
    wait(lambda: "Valid" in text("#plan-check"), "the valid edit")
    wait(lambda: send.is_enabled(), "the send button")
    send.click()
    wait(lambda: session_status() == "completed", "the edited plan's run")
    assert statuses() == {"customer": "COMPLETED"}, statuses()
    ran = [c["tool"] for c in calls()]
    assert ran == ["lookup"], ran
    ok("the edited plan ran instead of the proposed one")
    no_page_errors()


def scrub_and_fork():
    sign_in()
    sid = start("desk", "Refund the last order of customer c-42.", '{"customerId": "c-42", "amount": 50}')
    wait(lambda: session_status() == "completed", "the run", 40)
    view = api(f"/sessions/{sid}")
    # The event that ends the first wave: both lookups done, the refund not begun.
    click("#tab-events")
    wait(lambda: len(texts("#tab-panel .events button:not(.inspect)")) == view["last_seq"], "every event listed")
    target = None
    for t in texts("#tab-panel .events button:not(.inspect)"):
        if "wave_finished" in t:
            target = int(t.split("wave_finished")[0].strip().lstrip("#"))
            break
    assert target, "no wave_finished event listed"
    slider = one("#travel")
    slider.click()
    slider.send_keys(Keys.END)
    for _ in range(view["last_seq"] - target):
        slider.send_keys(Keys.ARROW_LEFT)
    wait(lambda: f"Event {target} of" in text("#travel-where"), "the slider at the event")
    wait(
        lambda: statuses() == {"customer": "COMPLETED", "orders": "COMPLETED", "refund": "PENDING", "tell": "PENDING"},
        "the plan as it was then",
    )
    assert not q("#answer-panel:not([hidden])"), "the answer shows before it was given"
    ok("the slider redraws the session as it was at an event")
    shot("playground-time-travel.png")
    # Back to live with `l`, then to the same point again with `[` (one event back each).
    ActionChains(D).send_keys("l").perform()
    wait(lambda: all(v == "COMPLETED" for v in statuses().values()), "live again")
    ActionChains(D).send_keys("[" * (view["last_seq"] - target)).perform()
    wait(lambda: f"Event {target} of" in text("#travel-where"), "the slider back at the event")
    wait(lambda: statuses().get("refund") == "PENDING", "back at the event")
    before = len(calls())
    click("#fork")
    wait(lambda: "#/s/" in D.current_url and sid not in D.current_url, "the fork's page")
    fork = D.current_url.split("#/s/")[1]
    wait(lambda: session_status() == "completed", "the fork's run", 40)
    assert "forked from" in text(".s-meta")
    st = statuses()
    assert all(v == "COMPLETED" for v in st.values()), st
    ran = [c["tool"] for c in calls()[before:]]
    assert sorted(ran) == ["notify", "refund"], f"the fork ran {ran}; the lookups were done before the fork point"
    info = api(f"/sessions/{fork}")
    assert info["forked_from"] == {"session": sid, "at": target}, info["forked_from"]
    ok("the fork continued from the event and ran only what came after it")
    no_page_errors()


def failed_step():
    sign_in()
    start("breaker", "Refund 900 to c-9.", '{"customerId": "c-9", "amount": 900}')
    wait(lambda: session_status() == "failed", "the failed run")
    wait(lambda: statuses().get("refund") == "FAILED", "the failed node")
    failure = text("#failure")
    assert "Step refund" in failure and "exit_status" in failure and "exceeds the refund limit of 500" in failure, failure
    assert "What to do" in failure, failure
    # The failed step is open in the details, with the tool's stderr.
    details = text('#step-details[data-step="refund"]')
    assert "ValueError: amount 900 exceeds the refund limit of 500" in details, details
    assert "Traceback" in text('#step-details pre.output[data-field="stderr"]')
    ok("the failed step, its error, stderr and what to do are shown")
    shot("playground-failed.png")
    # Clicking the failed step (shown by the page itself) keeps its error open.
    click('.node[data-step="refund"]')
    time.sleep(0.3)
    assert q('#step-details[data-step="refund"] #step-error'), "the first click on the failed step closed its error"
    click('.node[data-step="refund"]')
    wait(lambda: not q('#step-details[data-step="refund"]'), "the second click closing it")
    ok("the first click on the failed step keeps its error open")
    no_page_errors()


def sign_out_and_in():
    """Signing out stops the list's polls: the form and a half-typed key stay; signing in again
    polls once, not twice."""
    sign_in()
    polls = lambda: D.execute_script(
        "return performance.getEntriesByType('resource').filter(e => e.name.includes('/sessions?')).length"
    )
    click("#sign-out")
    wait(lambda: "Signed out." in text("#signin"), "the sign-in form")
    one("#api-key").send_keys("half-a-k")
    before = polls()
    time.sleep(6)
    assert polls() == before, f"{polls() - before} polls of /sessions after signing out"
    assert "Signed out." in text("#signin"), text("#signin")
    value = D.execute_script("return document.getElementById('api-key').value")
    assert value == "half-a-k", f"the half-typed key became {value!r}"
    ok("after signing out nothing polls and the form keeps what is typed")
    key = one("#api-key")
    key.clear()
    key.send_keys(KEY)
    click("#signin-submit")
    one(".filters")
    before = polls()
    time.sleep(6.2)
    n = polls() - before
    # One poller: the list at sign-in, then every 2.5 s: 3 in 6 s (two pollers make 6).
    assert n <= 4, f"{n} polls of /sessions in 6 s after signing in again"
    ok("signing in again polls the list once")
    no_page_errors()


def wrong_key():
    """Signing in with a key the server refuses: the form stays, with the key typed, and says
    that the server refused it; the key is not kept; a valid key then signs in."""
    D.get(URL)
    one("#api-key").send_keys("not-a-key-of-this-server")
    click("#signin-submit")
    wait(lambda: "The server refused the API key" in text("#signin .problems"), "the refusal in the form", 10)
    kept = D.execute_script("return [sessionStorage.length, localStorage.length]")
    assert kept == [0, 0], f"the refused key was kept: {kept}"
    value = D.execute_script("return document.getElementById('api-key').value")
    assert value == "not-a-key-of-this-server", value
    ok("a refused key is said in the sign-in form and not kept")
    key = one("#api-key")
    key.clear()
    key.send_keys(KEY)
    click("#signin-submit")
    one(".filters")
    ok("a valid key then signs in")
    # The refused request is logged as a failed load (401); nothing else may be.
    bad = [l for l in D.get_log("browser") if l["level"] == "SEVERE" and "401" not in l["message"]]
    assert not bad, f"the page logged errors: {bad}"


def react_timeline():
    """A ReAct session's tool calls in the timeline are buttons, reached with the keyboard:
    Enter on one opens its card in the Tool calls tab, focused."""
    sign_in()
    start("spender", "Spend a little.")
    wait(lambda: session_status() == "completed", "the run", 40)
    click("#tab-timeline")
    one("#timeline")
    bars = D.execute_script(
        "return [...document.querySelectorAll(\"#timeline .tl-row[data-row='tool:echo'] .tl-bar\")]"
        ".map(b => [b.tagName, b.dataset.callId || ''])"
    )
    assert len(bars) == 3 and all(t == "BUTTON" and c for t, c in bars), bars
    ok("a ReAct session's tool call bars are buttons")
    second = bars[1][1]
    # Tab from the timeline's first bar (a model call) until the second echo call's bar has focus.
    D.execute_script("document.querySelector('#timeline button.tl-bar').focus()")
    for _ in range(40):
        if D.execute_script("return document.activeElement.dataset.callId || ''") == second:
            break
        ActionChains(D).send_keys(Keys.TAB).perform()
    assert D.execute_script("return document.activeElement.dataset.callId || ''") == second, "the keyboard never reached the bar"
    ActionChains(D).send_keys(Keys.ENTER).perform()
    wait(lambda: D.execute_script("return document.activeElement.matches('.card.call') && document.activeElement.dataset.call") == second, "the call's card focused")
    assert D.execute_script("return document.getElementById('tab-calls').getAttribute('aria-selected')") == "true"
    ok("a tool call's bar opens its card with the keyboard")
    no_page_errors()


def ask_user_on_a_narrow_window():
    """A ReAct question without missing arguments, answered on a narrow window: no
    "undefined", the answered call is not pending, and the conversation fits the window."""
    D.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 380, "height": 820, "deviceScaleFactor": 1, "mobile": True})
    sign_in()
    start("clerk", "Move 120 to savings.")
    one("#waiting[data-kind=question]")
    panel = text("#waiting")
    assert "Which account should the 120 go to?" in panel, panel
    assert "undefined" not in panel and "false" not in panel, panel
    ok("a question without missing arguments shows no undefined")
    one("#answer-text").send_keys("savings-account-0042-of-customer-c-42")
    click("[data-act=send]")
    wait(lambda: session_status() == "completed", "the session completed after the answer")
    wait(lambda: any(t.startswith("transfer(") for t in texts(".msg .calls .chip")), "the transfer call drawn")
    chips = texts(".msg .calls .chip")
    asked = [t for t in chips if t.startswith("ask_user(")]
    assert asked and all("pending" not in t for t in asked), chips
    assert "answered" in asked[0], chips
    ok("an answered ask_user call is not pending")
    width = D.execute_script("const m = document.getElementById('main'); return [Math.max(document.documentElement.scrollWidth, m.scrollWidth), window.innerWidth]")
    assert width[0] <= width[1], f"the conversation is wider than a narrow window: {width}"
    ok("the conversation fits a narrow window")
    no_page_errors()


def steps_that_can_never_run():
    """A step that needs a failed step's output, in a session that completed: skipped, in the
    waves that ran, not pending in a wave to come."""
    sign_in()
    sid = start("partial", "Refund 900 to c-9 and tell them.", '{"customerId": "c-9", "amount": 900}')
    wait(lambda: session_status() == "completed", "the completed run")
    wait(lambda: statuses() == {"customer": "COMPLETED", "refund": "FAILED", "tell": "SKIPPED"}, "the steps settled")
    head = text("#flow .panel-head")
    assert "3 steps · 2 waves" in head, head
    labels = texts(".graph .col-label")
    assert not any("to come" in l for l in labels), labels
    view = api(f"/sessions/{sid}")
    tell = [n for n in view["plan"]["nodes"] if n["id"] == "tell"][0]
    assert tell["status"] == "SKIPPED" and "refund" in (tell["reason"] or "") and not tell["projected"], tell
    banner = text("#alerts")
    assert "Step refund failed" in banner, banner
    click('.node[data-step="tell"]')
    details = text("#step-details")
    assert "refund" in details and "to come" not in details, details
    ok("a step that needs a failed step is skipped, not pending in a wave to come")
    no_page_errors()


def denied_approval():
    """A plan step whose approval is denied, in a session that then completes: the denied step is
    failed within the waves that ran (not drawn in a wave to come), the step that needed it is
    skipped, the banner names the denied step, and its details give the person's reason."""
    sign_in()
    sid = start("denier", "Refund 50 to c-5 and tell them.", '{"customerId": "c-5", "amount": 50}')
    one("#waiting[data-kind=tool_approval]")
    reason = one("#deny-reason")
    reason.send_keys("not before the audit")
    click("[data-act=deny]")
    wait(lambda: session_status() == "completed", "the completed run", 40)
    wait(lambda: statuses() == {"customer": "COMPLETED", "refund": "FAILED", "tell": "SKIPPED"}, "the steps settled")
    assert [c for c in calls() if c["tool"] == "refund"] == [], calls()
    # Neither the denied step nor the one after it is drawn in a wave to come: both settled
    # within the wave that ran, beside what they needed.
    view = api(f"/sessions/{sid}")
    nodes = {n["id"]: n for n in view["plan"]["nodes"]}
    assert not any(n["projected"] for n in nodes.values()), nodes
    assert {n["wave"] for n in nodes.values()} == {1}, nodes
    labels = texts(".graph .col-label")
    assert not any("to come" in l for l in labels), labels
    banner = text("#alerts")
    assert "Step refund failed (denied)" in banner, banner
    click('.node[data-step="refund"]')
    details = text("#step-details")
    assert "to come" not in details and "not before the audit" in details, details
    ok("a denied step is failed in its wave and named, the step after it skipped")
    no_page_errors()


def event_counts_agree():
    """The Events tab, the header and the slider count the same events, with another tab open
    and on a session opened after it finished."""
    sign_in()
    sid = start("desk", "Refund the last order of customer c-42.", '{"customerId": "c-42", "amount": 50}')
    wait(lambda: session_status() == "completed", "the run", 40)
    last = api(f"/sessions/{sid}")["last_seq"]
    D.get(URL + "#/")
    one(".filters")
    D.get(URL + f"#/s/{sid}")
    wait(lambda: session_status() == "completed", "the session page")
    assert D.execute_script("return document.getElementById('tab-calls').getAttribute('aria-selected')") == "true"
    wait(lambda: text("#tab-events") == f"Events ({last})", f"Events ({last}) with the calls tab open", 5)
    wait(lambda: text("#event-count") == str(last), "the header's count", 5)
    assert D.execute_script("return document.getElementById('travel').max") == str(last)
    ok("the Events tab, the header and the slider count the same events")
    no_page_errors()


def session_timeline():
    """The session on one time axis: the model's calls, the waves and their steps' calls;
    overlapping lookups overlap, the refund comes after both; a bar selects its step."""
    sign_in()
    sid = start("desk", "Refund the last order of customer c-42.", '{"customerId": "c-42", "amount": 50}')
    wait(lambda: session_status() == "completed", "the run", 40)
    click("#tab-timeline")
    one("#timeline")
    groups = texts("#timeline .tl-group .tl-head .tl-label")
    assert groups == ["Model", "Wave 1", "Wave 2", "Wave 3"], groups
    rows = texts("#timeline .tl-group .tl-row:not(.tl-head) .tl-label")
    assert {"plan", "review", "customer", "orders", "refund", "tell"} <= set(rows), rows
    bar = lambda step: D.execute_script(
        "const b = document.querySelector(`#timeline .tl-row[data-row='${arguments[0]}'] button.tl-bar`);"
        "return b && [Number(b.dataset.from), Number(b.dataset.to), b.getBoundingClientRect().left, b.getBoundingClientRect().right];",
        step,
    )
    c, o, r, t = bar("customer"), bar("orders"), bar("refund"), bar("tell")
    assert c and o and r and t, (c, o, r, t)
    assert c[0] < o[1] and o[0] < c[1], f"the lookups of wave 1 do not overlap: {c} {o}"
    assert r[0] >= max(c[1], o[1]) and r[2] >= max(c[3], o[3]) - 1, f"the refund does not come after both lookups: {r} {c} {o}"
    assert t[0] >= r[1], (t, r)
    assert 1000 <= r[1] - r[0] <= 5000, f"the refund's bar lasts {r[1] - r[0]} ms (its tool sleeps 1 s)"
    ok("the timeline shows the waves' calls on one time axis")
    D.execute_script("document.querySelector(\"#timeline .tl-row[data-row='refund'] button.tl-bar\").click()")
    wait(lambda: q('#step-details[data-step="refund"]'), "the refund selected from its bar")
    wait(lambda: q('.node.selected[data-step="refund"]') and q("#timeline .tl-row.selected[data-row='refund']"), "the node and the row selected")
    click('.node[data-step="orders"]')
    wait(lambda: q("#timeline .tl-row.selected[data-row='orders']"), "the row of the node chosen in the plan")
    ok("a bar selects its step in the plan, and a node its row")
    if SHOTS:
        D.execute_script("document.getElementById('activity').scrollIntoView()")
        time.sleep(0.3)
        D.save_screenshot(os.path.join(SHOTS, "playground-timeline.png"))
    no_page_errors()


def eval_runs():
    """Two `weft eval` runs put into the store before the server started (`good`, all pass;
    `broken`, whose refund-a1001 case fails its trajectory): the Evals view lists them, a run
    shows its cases and each scorer's verdict and reason, a case opens its session, and two
    ticked runs are compared."""
    sign_in()
    click("#evals-link")
    wait(lambda: len(q("#eval-runs tr.eval-run")) == 2, "both eval runs listed")
    runs = D.execute_script("return [...document.querySelectorAll('#eval-runs tr.eval-run')].map(r => r.dataset.run)")
    assert runs == ["broken", "good"], runs
    assert "2/3" in text("#eval-runs tr[data-run='broken'] td.cases-passed"), text("#eval-runs")
    assert "3/3" in text("#eval-runs tr[data-run='good'] td.cases-passed"), text("#eval-runs")
    assert "support-triage" in text("#eval-runs tr[data-run='broken']"), text("#eval-runs")
    ok("the Evals view lists both runs with their cases passed")
    click("#eval-runs tr[data-run='broken'] a.run-link")
    wait(lambda: "#/evals/broken" in D.current_url and len(q("#eval-cases tr.eval-case")) == 3, "the run's cases")
    verdicts = D.execute_script("return Object.fromEntries([...document.querySelectorAll('#eval-cases tr.eval-case')].map(r => [r.dataset.case, r.dataset.pass]))")
    assert verdicts == {"delivery-address": "true", "refund-a1001": "false", "refund-asks-for-the-order": "true"}, verdicts
    reason = text("#eval-cases tr[data-case='refund-a1001'] li.verdict.fail[data-scorer='trajectory'] .reason")
    assert "issueRefund" in reason, text("#eval-cases")
    assert q("#eval-cases tr[data-case='delivery-address'] li.verdict.pass[data-scorer='status']"), text("#eval-cases")
    assert "2/3" in text("#eval-body .stats"), text("#eval-body .stats")
    ok("a run shows each case's verdict and each scorer's reason")
    shot("playground-evals.png")
    click("#eval-failed-only")
    wait(lambda: len(q("#eval-cases tr.eval-case")) == 1, "only the failed case")
    click("#eval-failed-only")
    wait(lambda: len(q("#eval-cases tr.eval-case")) == 3, "every case again")
    click("#eval-cases tr[data-case='refund-a1001'] a.session-link")
    wait(lambda: D.current_url.endswith("#/s/broken-refund-a1001-r1"), "the case's session")
    wait(lambda: session_status() is not None, "the session drawn")
    assert "refund" in text("main").lower(), text("main")
    ok("a case opens its session")
    D.get(URL + "#/evals")
    wait(lambda: len(q("#eval-runs input.pick")) == 2, "the runs' boxes")
    assert not one("#evals-compare").is_enabled()
    for box in q("#eval-runs input.pick"):
        box.click()
    wait(lambda: one("#evals-compare").is_enabled(), "the compare button enabled")
    click("#evals-compare")
    wait(lambda: "#/evals/good/compare/broken" in D.current_url and q("#eval-compare tr.eval-change"), "the comparison")
    first = D.execute_script("const r = document.querySelector('#eval-compare tr.eval-change'); return [r.dataset.case, r.dataset.verdict]")
    assert first == ["refund-a1001", "regressed"], first
    assert "1 case regressed" in text("#compare-verdict"), text("#compare-verdict")
    ok("two ticked runs are compared, regressions first")


def spending():
    """The header shows the user's spending against their quota; a priced run under a budget
    shows what it spent against each limit, and the header follows it."""
    sign_in()
    wait(lambda: text("#my-usage").startswith("quota: today $0 of $100"), "the quota at first")
    ok("the user's quota is shown from the start")
    sid = start("spender", "Spend a little.")
    wait(lambda: session_status() == "completed", "the run", 40)
    v = api(f"/sessions/{sid}")
    spent = v["spending"]["run"]["cost_usd"]
    assert spent > 0, v["spending"]
    wait(lambda: "run.cost_usd $" in text("#session-budget"), "the budget line")
    line = text("#session-budget")
    assert "of $50.00" in line and "session.model_calls 4 of 100" in line, line
    ok("the run's spending is shown against its budget")
    me = api("/me/usage")
    day = me["periods"][0]["used"]["cost_usd"]
    assert abs(day - spent) < 1e-9, (day, spent)
    want = f"today ${day:.2f} of $100" if day >= 0.01 else f"today ${day:.4f} of $100"
    wait(lambda: want in text("#my-usage"), f"the header's spending ({want})", 15)
    ok("the user's spending against their quota follows the run")


def model_call_inspector():
    """A plan request opened in the inspector from the timeline: the task and the tools offered
    are in it, the reply's plan and the plan it became; the calls' tokens, one by one, add up to
    the session's totals as the page's header shows them."""
    sign_in()
    task = "Refund the last order of customer c-42."
    sid = start("desk", task, '{"customerId": "c-42", "amount": 50}')
    wait(lambda: session_status() == "completed", "the run", 40)
    click("#tab-timeline")
    one("#timeline")
    # The plan call's bar in the timeline opens it.
    D.execute_script("document.querySelector(\"#timeline .tl-row[data-row='plan'] button.tl-bar[data-call]\").click()")
    wait(lambda: D.execute_script("const t = document.getElementById('tab-model'); return t && t.getAttribute('aria-selected') === 'true';"), "the Model calls tab")
    wait(lambda: q("#inspector[data-n='1'] #mc-messages"), "model call 1 in the inspector")
    assert "plan" in text("#inspector h3"), text("#inspector h3")
    request = D.execute_script("return document.getElementById('mc-messages').textContent")
    assert task in request, f"the task is not in the request: {request[:2000]}"
    # The planner is given the tools as a list in its prompt (name, category, what it does), and
    # no tool to call; its reply must match a schema that spells out each tool's step.
    listed = [l.strip() for l in request.split("Tools (name [category]: what it does):")[1].split("\n")[1:5]]
    assert listed == [
        "- billingHistory [billing]: A customer's orders and payments.",
        "- issueRefund [billing]: Refund an amount to a customer.",
        "- lookupCustomer [crm]: Look up a customer.",
        "- notify [general]: Tell the customer.",
    ], listed
    assert "Tools offered for calling (0)" in text("#mc-tools summary"), text("#mc-tools summary")
    assert "JSON matching a schema" in text("#mc-format summary"), text("#mc-format summary")
    schema = D.execute_script("return document.querySelector('#mc-format .json-tree').textContent")
    for tool in ["lookupCustomer", "billingHistory", "issueRefund", "notify"]:
        assert tool in schema, (tool, schema[:2000])
    ok("a plan request shows the task and the tool list")
    raw = json.loads(D.execute_script("return document.querySelector('#mc-reply .mc-raw').textContent"))
    assert [s["_id"] for s in raw["plan"]] == ["customer", "orders", "refund", "tell"], raw
    decided = D.execute_script("return [...document.querySelectorAll('#mc-decision > li')].map(l => l.dataset.type)")
    assert decided[0] == "plan_accepted", decided
    accepted = D.execute_script("return document.querySelector('#mc-decision > li').textContent")
    for step in ["customer", "orders", "refund", "tell"]:
        assert step in accepted, (step, accepted)
    ok("the raw reply holds the plan and the parsed decision accepts it")
    # Per-call tokens, read from the table's rows, against the session's totals as the page
    # shows them (the API's, read by the page).
    rows = D.execute_script("return [...document.querySelectorAll('#model-calls tbody tr.mc-row')].map(r => [r.dataset.purpose, Number(r.dataset.input), Number(r.dataset.output)])")
    assert [r[0] for r in rows] == ["plan", "review", "review", "review", "respond", "response_review"], rows
    view = api(f"/sessions/{sid}")
    total_in, total_out = view["usage"]["input_tokens"], view["usage"]["output_tokens"]
    assert sum(r[1] for r in rows) == total_in and sum(r[2] for r in rows) == total_out, (rows, view["usage"])
    foot = D.execute_script("const f = document.getElementById('mc-sum').dataset; return [Number(f.input), Number(f.output), f.agrees]")
    assert foot == [total_in, total_out, "1"], foot
    ok("the calls' tokens add up to the session's totals")
    # Another call opens from its row; an event's Inspect button opens its call.
    click("#model-calls tbody tr[data-n='2'] button.mc-open")
    wait(lambda: q("#inspector[data-n='2'] #mc-decision li[data-type='review_decided']"), "the first review in the inspector")
    click("#tab-events")
    click(".events button.inspect[data-call='5']")
    wait(lambda: q("#inspector[data-n='5'] #mc-reply .mc-raw"), "the answer's call from the events")
    assert "Refunded 50" in text("#inspector #mc-reply"), text("#inspector #mc-reply")
    ok("a call opens from its row and from its event")
    # The timeline's waves say what their reviews used (the review after each wave).
    click("#tab-timeline")
    one("#timeline")
    reviews = [r[1] + r[2] for r in rows if r[0] == "review"]
    spent = D.execute_script("return [...document.querySelectorAll('#timeline .tl-head .tl-usage')].map(u => Number(u.dataset.tokens))")
    assert spent == reviews, (spent, reviews)
    ok("each wave shows the tokens of the review after it")
    click("#tab-model")
    click("#model-calls tbody tr[data-n='1'] button.mc-open")
    wait(lambda: q("#inspector[data-n='1'] #mc-messages"), "the plan call again")
    if SHOTS:
        D.execute_script("document.getElementById('activity').scrollIntoView()")
        time.sleep(0.3)
        D.save_screenshot(os.path.join(SHOTS, "playground-inspector.png"))
    no_page_errors()


def compare_fork():
    """`origin` was run before the server started; since, the refund tool's receipt and the
    model's answer changed. A fork of it after its first wave, opened, is compared with its
    origin (offered first) from its page: the fork's event is named, the refund step and its
    result's receipt are marked as differing, the lookups as alike, and the answers' words that
    differ are struck and underlined. The comparison's address opens it again."""
    sign_in()
    view = api("/sessions/origin")
    second = [w["seq"] for w in view["plan"]["waves"] if w["wave"] == 2][0]
    at = next(n for n in range(second, 0, -1) if api(f"/sessions/origin?at={n}")["event"]["type"] == "wave_finished")
    fork = api_post("/sessions/origin/fork", {"at": at})
    fid = fork["id"]
    D.get(URL + f"#/s/{fid}")
    wait(lambda: session_status() == "completed", "the fork's run", 40)
    click("#compare-open")
    one("#compare-with option")
    first = D.execute_script("return document.querySelector('#compare-with').value")
    assert first == "origin", f"the first session offered is {first}, not the fork's origin"
    click("#compare-go")
    wait(lambda: D.current_url.endswith(f"#/compare/origin/{fid}") and q("#compare-steps"), "the comparison")
    ok("a fork's page offers its origin first and opens the comparison")
    assert f"#{at} wave_finished" in text("#compare-fork"), text("#compare-fork")
    ok("the event where the fork parts is named")
    changes = D.execute_script("return Object.fromEntries([...document.querySelectorAll('#compare-steps tr.cmp-step')].map(r => [r.dataset.key, r.dataset.change]))")
    assert changes == {"customer": "same", "orders": "same", "refund": "differs", "tell": "same"}, changes
    assert D.execute_script("return document.querySelector(\"#compare-steps tr[data-key='refund']\").dataset.differs") == "result"
    marked = lambda side: text(f"#compare-steps tr[data-key='refund'] td[data-side='{side}'] .cmp-result li.j-diff[data-path='/receipt']")
    assert "r-20931" in marked("a") and "r-77777" in marked("b"), (marked("a"), marked("b"))
    assert not q("#compare-steps tr[data-key='customer'] li.j-diff"), "a step alike in both has marks"
    ok("the differing step and its result's receipt are marked, the others alike")
    assert texts("#compare-answer del.w-removed") == ["r-20931)"], texts("#compare-answer del.w-removed")
    assert texts("#compare-answer ins.w-added") == ["r-77777)"], texts("#compare-answer ins.w-added")
    fields = D.execute_script("return Object.fromEntries([...document.querySelectorAll('#compare-head tr.cmp-field')].map(r => [r.dataset.field, r.dataset.differs]))")
    assert fields["task"] == "0" and fields["input"] == "0" and fields["status"] == "0", fields
    ok("the answers' differing words are struck and underlined")
    D.set_window_size(1440, 1500)
    shot("playground-compare.png")
    D.set_window_size(1440, 1000)
    D.refresh()
    wait(lambda: q("#compare-steps tr[data-key='refund'][data-change='differs']"), "the comparison from its address")
    ok("the comparison opens from its address")


# --- Large plans -------------------------------------------------------------------------------


def in_panel(step):
    """Whether step `step`'s node is drawn whole inside the graph's panel."""
    return D.execute_script(
        "const n = document.querySelector(`#graph .node[data-step='${arguments[0]}']`);"
        "if (!n) return false;"
        "const a = n.getBoundingClientRect(), p = document.getElementById('graph').getBoundingClientRect();"
        "return a.width > 0 && a.left >= p.left - 1 && a.top >= p.top - 1 && a.right <= p.right + 1 && a.bottom <= p.bottom + 1;",
        step,
    )


def view_transform():
    """The graph's view: (scale, x, y) from its transform."""
    t = D.execute_script("return document.querySelector('#graph .world').getAttribute('transform')")
    import re

    m = re.match(r"translate\(([-\d.]+),([-\d.]+)\) scale\(([-\d.]+)\)", t)
    assert m, t
    return float(m.group(3)), float(m.group(1)), float(m.group(2))


def graph_1000():
    """A finished session of 1,000 steps in 22 waves (made by `weft run` before the server
    started): its first paint is measured from the click that opens it to the graph drawn; fit,
    zoom (keys, buttons, wheel), pan (keys, drag), the minimap, finding a step and folding the
    finished waves do what they say; tokens and cost are on the wave headers and the executor
    step's node."""
    sign_in()
    sid = [s["id"] for s in api("/sessions")["sessions"] if s["agent"] == "wide"][0]
    one(f'.session-item[data-id="{sid}"]')
    paint = D.execute_async_script(
        "const [sid, done] = [arguments[0], arguments[arguments.length - 1]];"
        "const t0 = performance.now();"
        "document.querySelector(`.session-item[data-id='${sid}']`).click();"
        "const tick = () => document.querySelector('#graph svg[aria-label^=\"Plan: 1000 steps\"] .node')"
        "  ? requestAnimationFrame(() => setTimeout(() => done(performance.now() - t0)))"
        "  : requestAnimationFrame(tick);"
        "tick();",
        sid,
    )
    print(f"figure: first paint of the 1,000-step session: {paint:.0f} ms (click to graph drawn)", flush=True)
    assert paint < 5000, f"first paint took {paint:.0f} ms"
    drawn = len(q("#graph .node"))
    assert 0 < drawn < 200, f"{drawn} nodes drawn: the graph draws what is in view and near it"
    D.execute_script("document.getElementById('graph').scrollIntoView({block: 'center'})")
    ok("the 1,000-step session is drawn, its first paint measured")

    # The tokens come from the session's events, which follow the view.
    wait(lambda: "tok" in (texts("#graph .col-label") or [""])[0], "the wave headers' tokens")
    labels = texts("#graph .col-label")
    assert len(labels) == 22 and labels[0].startswith("Wave 1") and "tok" in labels[0] and "$" in labels[0], labels
    assert q('#graph .node[data-step="s0001"]') and not q('#graph .node[data-step="s0001"] .usage'), "an echo step made no model call"
    box = one("#graph-find")
    box.send_keys("s0950", Keys.ENTER)
    wait(lambda: q('#graph .node[data-step="s0950"] .usage'), "s0950 drawn with its usage")
    usage = D.execute_script("return document.querySelector(`#graph .node[data-step='s0950'] .usage`).textContent")
    assert usage == "840 tok · $0.0002", usage
    ok("tokens and cost are shown per wave and on a step with its own model call")

    # Find a step: it is shown, selected, focused, and its edges highlighted.
    box.clear()
    box.send_keys("s0777", Keys.ENTER)
    wait(lambda: q('#step-details[data-step="s0777"]'), "s0777's details")
    wait(lambda: in_panel("s0777"), "s0777 in the panel")
    assert q('#graph .node.selected[data-step="s0777"]'), "s0777 selected"
    assert D.execute_script("return document.activeElement?.dataset?.step") == "s0777"
    hot = {(e.get_attribute("data-from"), e.get_attribute("data-to")) for e in q("#graph .edge.hot")}
    assert hot == {("s0727", "s0777"), ("s0777", "s0827")}, hot
    assert q("#graph svg.graph.many"), "many edges are drawn faint"
    assert "wave 16" in text("#graph-found"), text("#graph-found")
    ok("searching s0777 puts it in view, selects it and highlights its edges")
    mini = one("#minimap")
    assert mini.is_displayed(), "the minimap shows while the plan is larger than the panel"
    k, x, y = view_transform()
    vx, vy, vw, vh = [int(v) for v in mini.get_attribute("data-view").split(",")]
    stage = D.execute_script("const r = document.getElementById('graph').getBoundingClientRect(); return [r.width, r.height]")
    assert abs(vx - (-x / k)) <= 2 and abs(vy - (-y / k)) <= 2 and abs(vw - stage[0] / k) <= 2, (vx, vy, vw, x, y, k, stage)
    shot("playground-graph-1000.png")

    # The minimap moves the view: a click near its right edge shows the last waves.
    D.execute_script("document.getElementById('graph').scrollIntoView({block: 'center'})")
    rect = D.execute_script("const r = document.getElementById('minimap').getBoundingClientRect(); return [r.width, r.height]")
    ActionChains(D).move_to_element_with_offset(mini, int(rect[0] / 2) - 6, int(-rect[1] / 2) + 10).click().perform()
    wait(lambda: view_transform()[1] < x - 1000, "the view to move right")
    labels_in_view = D.execute_script(
        "const p = document.getElementById('graph').getBoundingClientRect();"
        "return [...document.querySelectorAll('#graph .col-label')].filter(l => { const r = l.getBoundingClientRect(); return r.left >= p.left && r.right <= p.right; }).map(l => l.textContent)"
    )
    assert any(l.startswith("Wave 22") or l.startswith("Wave 21") for l in labels_in_view), labels_in_view
    ok("the minimap shows the viewport and moves it")

    # Zoom: keys, buttons and the wheel; pan: keys and drag; fit shows every node.
    stage_el = one("#graph")
    k0 = view_transform()[0]
    D.execute_script("document.getElementById('graph').focus()")
    stage_el.send_keys("+")
    assert abs(view_transform()[0] - min(2, k0 * 1.25)) < 0.01, (k0, view_transform())
    stage_el.send_keys("-")
    assert abs(view_transform()[0] - k0) < 0.01, (k0, view_transform())
    click("#graph-zoom-out")
    assert view_transform()[0] < k0 - 0.01
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    k1 = view_transform()[0]
    ActionChains(D).scroll_from_origin(ScrollOrigin.from_element(stage_el, 0, 0), 0, -200).perform()
    wait(lambda: view_transform()[0] > k1 + 0.01, "the wheel to zoom in")
    _, x1, y1 = view_transform()
    D.execute_script("document.getElementById('graph').focus()")
    stage_el.send_keys(Keys.ARROW_LEFT)
    assert abs(view_transform()[1] - (x1 + 80)) < 1.5, (x1, view_transform())
    # Drag from a point of the panel with no node under it (page coordinates of the viewport).
    D.execute_script("document.getElementById('graph').scrollIntoView({block: 'center'})")
    spot = D.execute_script(
        "const p = document.getElementById('graph').getBoundingClientRect();"
        "for (let y = p.top + 10; y < p.bottom - 10; y += 7) for (let x = p.left + 10; x < p.right - 220; x += 7) {"
        "  const e = document.elementFromPoint(x, y); if (e && e.closest('#graph') && !e.closest('.node, .minimap, .wave-box, .col-label')) return [Math.round(x), Math.round(y)]; }"
        "return null;"
    )
    assert spot, "no empty spot in the panel"
    _, x2, y2 = view_transform()
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    drag = ActionBuilder(D)
    drag.pointer_action.move_to_location(spot[0], spot[1]).pointer_down().move_to_location(spot[0] + 120, spot[1] - 60).pointer_up()
    drag.perform()
    _, x3, y3 = view_transform()
    assert abs((x3 - x2) - 120) < 3 and abs((y3 - y2) + 60) < 3, (x2, y2, x3, y3)
    click("#graph-fit")
    inside = D.execute_script(
        "const p = document.getElementById('graph').getBoundingClientRect();"
        "return [...document.querySelectorAll('#graph .node')].every(n => { const a = n.getBoundingClientRect(); return a.left >= p.left - 1 && a.top >= p.top - 1 && a.right <= p.right + 1 && a.bottom <= p.bottom + 1; })"
    )
    assert inside, "fit leaves a node outside the panel"
    assert len(q("#graph .node")) == 1000, len(q("#graph .node"))
    assert not one("#minimap").is_displayed(), "the minimap hides when the whole plan is in view"
    ok("fit, zoom and pan do what they say, with the mouse and the keyboard")

    # Fold the finished waves: one box per wave with its counts, tokens and cost.
    click("#graph-collapse")
    wait(lambda: len(q("#graph .wave-box")) == 22, "22 folded waves")
    assert not q("#graph .node"), "folded waves draw no step"
    first = D.execute_script("const b = document.querySelector(`#graph .wave-box[data-wave='1']`); return [b.dataset.ok, b.dataset.failed, b.dataset.skipped, b.textContent]")
    assert first[:3] == ["50", "0", "0"] and "tok" in first[3] and "$0.0005" in first[3], first
    last = D.execute_script("const b = document.querySelector(`#graph .wave-box[data-wave='20']`); return [b.dataset.ok, b.textContent]")
    assert last[0] == "1" and "$0.0007" in last[1], last
    assert len(q("#graph .edge.bundle")) == 21, len(q("#graph .edge.bundle"))
    click('#graph .wave-box[data-wave="3"]')
    wait(lambda: len(q("#graph .wave-box")) == 21 and q('#graph .node[data-step="s0100"]'), "wave 3 unfolded")
    ok("finished waves fold into one box with their counts, tokens and cost")
    no_page_errors()


def live_200():
    """A live run of 200 steps (10 waves of 20, each step a command that sleeps): long tasks are
    recorded while its events arrive, the running steps stay in the panel, the page applies the
    events instead of fetching the session again (the fetches are counted), what it draws matches
    the server's view at the same event, and its final page equals a fresh load's."""
    sign_in()
    D.execute_script(
        "performance.setResourceTimingBufferSize(10000);"
        "window.__long = [];"
        "new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); }).observe({ type: 'longtask' });"
        # What the long frames spent their time on: the scripts (by function), and style, layout
        # and paint after them.
        "window.__frames = [];"
        "new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__frames.push({ duration: e.duration,"
        " render: e.renderStart ? e.startTime + e.duration - e.renderStart : 0,"
        " layout: e.styleAndLayoutStart ? e.startTime + e.duration - e.styleAndLayoutStart : 0,"
        " scripts: e.scripts.map((s) => ({ name: `${s.invoker} ${s.sourceFunctionName || ''} ${(s.sourceURL || '').split('/').pop()}:${s.sourceCharPosition}`, duration: s.duration, forced: s.forcedStyleAndLayoutDuration })) }); }).observe({ type: 'long-animation-frame' });"
    )
    sid = start("slow200", "Run two hundred slow steps.")
    wait(lambda: q('#graph svg[aria-label^="Plan: 200 steps"] .node'), "the 200 steps' plan drawn", 60)
    samples = matched = 0
    lost = []
    deadline = time.time() + 180
    while time.time() < deadline and session_status() != "completed":
        running = D.execute_script("return [...document.querySelectorAll('#graph .node[data-status=RUNNING]')].map(n => n.dataset.step)")
        if running and samples < 12:
            # The view follows at its next redraw (at most one a second during a burst): a wave
            # that has just started may be outside the panel for that long. Waves overlap here
            # (a step waits only for the step in its row of the wave before): the samples where
            # no running step came into the panel within 3 s are counted and printed; one is let
            # pass (a redraw that waited for a core on this shared machine).
            def followed():
                now = D.execute_script("return [...document.querySelectorAll('#graph .node[data-status=RUNNING]')].map(n => n.dataset.step)")
                return not now or any(in_panel(s) for s in now)

            t = time.time()
            while not followed() and time.time() - t < 3:
                time.sleep(0.1)
            if not followed():
                lost.append((running, view_transform()))
            samples += 1
        if matched < 3 and running:
            seq, drawn = D.execute_script(
                "return [Number(document.getElementById('flow').dataset.seq), Object.fromEntries([...document.querySelectorAll('#graph .node')].map(n => [n.dataset.step, n.dataset.status]))]"
            )
            assert isinstance(seq, (int, float)) and seq > 0, "the page does not say which event its drawing is at (#flow's data-seq)"
            view = api(f"/sessions/{sid}?at={seq}")
            server = {n["id"]: n["status"] for n in view["plan"]["nodes"]}
            # The nodes in view and near it are drawn: they are compared.
            assert len(drawn) >= 10 and {k: server.get(k) for k in drawn} == drawn, f"at event {seq} the page draws {drawn} where the server has {server}"
            matched += 1
        time.sleep(0.4)
    assert session_status() == "completed", session_status()
    assert samples >= 3, f"the running steps were seen only {samples} times"
    print(f"figure: live 200-step run: a running step in the panel within 3 s in {samples - len(lost)} of {samples} samples", flush=True)
    assert len(lost) <= 1, f"no running step came into the panel within 3 s in {len(lost)} of {samples} samples: {lost}"
    assert matched >= 3, matched
    ok("the running wave stays in the panel")
    ok("what the page drew from the events matches the server's view at the same event")
    wait(lambda: all(n["status"] == "COMPLETED" for n in api(f"/sessions/{sid}")["plan"]["nodes"]), "every step completed")
    time.sleep(1.5)
    longs = D.execute_script("return window.__long")
    fetches = D.execute_script(
        "return performance.getEntriesByType('resource').filter(e => { const u = new URL(e.name); return u.pathname === `/sessions/${arguments[0]}` && !u.search; }).length",
        sid,
    )
    events = api(f"/sessions/{sid}")["last_seq"]
    print(f"figure: live 200-step run: {events} events, {len(longs)} long tasks, longest {max(longs, default=0):.0f} ms, {fetches} full fetches of the session", flush=True)
    frames = sorted(D.execute_script("return window.__frames"), key=lambda f: -f["duration"])
    for f in frames[:5]:
        top = sorted(f["scripts"], key=lambda s: -s["duration"])[:3]
        said = "; ".join(f"{s['name']} {s['duration']:.0f} ms (forced layout {s['forced']:.0f})" for s in top)
        print(f"figure: live 200-step run: a long frame of {f['duration']:.0f} ms: render {f['render']:.0f} ms, style and layout {f['layout']:.0f} ms; scripts: {said}", flush=True)
    assert fetches <= 8, f"{fetches} full fetches of the session during a live run of {events} events"
    # The target is no task over 100 ms; a long task is wall time, and this machine's two cores
    # are shared with the server, its tools and other tests, so only a stall of a second fails.
    assert max(longs, default=0) < 1000, longs
    ok("the live run is drawn from its events with few full fetches and no long stall")
    same_as_a_fresh_load()
    ok("the live run's final page equals a fresh load's")
    no_page_errors()


def final_page():
    """What the page of a finished 200-step plan shows, fitted (every node drawn, whichever part
    it showed): the plan's heading, the waves, each node, the header, the details, the tabs'
    labels (with their counts) and where the slider stands."""
    import re

    click("#graph-fit")
    wait(lambda: len(q("#graph .node")) == 200, "every node drawn")
    page = json.loads(D.execute_script(
        "return JSON.stringify({plan: document.querySelector('#flow .panel-head').innerText,"
        " waves: [...document.querySelectorAll('#graph .col-label')].map(l => l.textContent),"
        " nodes: Object.fromEntries([...document.querySelectorAll('#graph .node')].map(n => [n.dataset.step, n.getAttribute('aria-label')])),"
        " header: document.querySelector('.s-head').innerText, details: document.querySelector('#details').innerText,"
        " tabs: [...document.querySelectorAll('#activity [role=tab]')].map(t => t.textContent),"
        " where: document.getElementById('travel-where').innerText})"
    ))
    # The header says how long ago the session started: that moves on.
    page["header"] = re.sub(r"started [^\n]*? ago", "", page["header"])
    return page


def same_as_a_fresh_load():
    """The finished 200-step plan's page, as the live page ended, equals a fresh load's."""
    live = final_page()
    D.refresh()
    wait(lambda: q('#graph svg[aria-label^="Plan: 200 steps"] .node') and session_status() == "completed", "the fresh load")
    time.sleep(1.0)
    fresh = final_page()
    for name in live:
        assert live[name] == fresh[name], f"the live page's {name} differs from a fresh load's:\n{str(live[name])[:2000]}\n---\n{str(fresh[name])[:2000]}"


class Proxy:
    """A TCP proxy between the browser and the server, whose connections the scenario drops.
    `drop(seconds, skip)` closes every connection and refuses new ones for `seconds`; with
    `skip`, the next request that names a `Last-Event-ID` has it moved on by `skip`, so the
    stream resumes past events the page never had (a gap)."""

    def __init__(self, target):
        import socket
        import threading

        self.target = target
        self.lock = threading.Lock()
        self.conns = set()
        self.refusing = False
        self.skip = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        import socket
        import threading

        while True:
            c, _ = self.listener.accept()
            if self.refusing:
                c.close()
                continue
            try:
                s = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns |= {c, s}
            threading.Thread(target=self.pump, args=(c, s, True), daemon=True).start()
            threading.Thread(target=self.pump, args=(s, c, False), daemon=True).start()

    def pump(self, src, dst, upstream):
        import re
        import socket

        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream and self.skip:
                    with self.lock:
                        skip, n = self.skip, 0

                        def bump(m):
                            return m.group(1) + str(int(m.group(2)) + skip).encode()

                        data, n = re.subn(rb"(?i)(last-event-id: *)(\d+)", bump, data)
                        if n:
                            self.skip = 0
                dst.sendall(data)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()
        with self.lock:
            self.conns -= {src, dst}

    def drop(self, seconds, skip=0):
        import socket

        self.refusing = True
        with self.lock:
            self.skip = skip
            for x in list(self.conns):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        time.sleep(seconds)
        self.refusing = False


def server_get(base, path):
    """The API straight from the server at `base` (not through the page, nor the proxy)."""
    import urllib.request

    req = urllib.request.Request(base.rstrip("/") + path, headers={"x-api-key": KEY})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def live_dropped():
    """A live 200-step run whose connection to the server drops twice mid-run (a proxy between
    the page and the server closes every connection and refuses new ones for a moment): after
    the first drop the event stream reconnects and the page fetches the session whole while the
    run still goes; at the second, the stream resumes five events past the last the page had (a
    gap): the page asks again for the events it missed and fetches the session whole. Its final
    page equals a fresh load's, the events tab's count and the slider's included."""
    global URL
    from urllib.parse import urlparse

    direct = URL
    u = urlparse(direct)
    proxy = Proxy((u.hostname, u.port))
    URL = f"http://127.0.0.1:{proxy.port}/"
    sign_in()
    sid = start("slow200", "Run two hundred slow steps.")
    wait(lambda: q('#graph svg[aria-label^="Plan: 200 steps"] .node'), "the 200 steps' plan drawn", 60)
    D.execute_script("performance.setResourceTimingBufferSize(10000)")
    full = (
        "return performance.getEntriesByType('resource').filter(e => { const u = new URL(e.name);"
        " return u.pathname === `/sessions/${arguments[0]}` && !u.search && e.startTime > arguments[1]; }).length"
    )

    def completed():
        return sum(1 for n in server_get(direct, f"/sessions/{sid}")["plan"]["nodes"] if n["status"] == "COMPLETED")

    for done_before, skip, what in [(20, 0, "a dropped stream"), (60, 5, "a gap in the event seqs")]:
        # Some waves are done: the page has followed the run's events for a while.
        wait(lambda: completed() >= done_before, f"{done_before} steps completed", 90)
        since = D.execute_script("return performance.now()")
        seen = " ".join(text("#travel-where").split())
        proxy.drop(1.5, skip)
        wait(lambda: text("#conn") == "● live", f"the stream back after {what}", 30)
        wait(lambda: D.execute_script(full, sid, since) > 0, f"a full fetch of the session after {what}", 10)
        assert server_get(direct, f"/sessions/{sid}")["status"] == "running", f"the run ended before the page was back after {what}"
        print(f"figure: live run through {what}: the slider said `{seen}` at the drop, {completed()} steps completed when the page was back", flush=True)
        ok(f"the page fetches the session whole after {what}")
    wait(lambda: session_status() == "completed", "the run completed", 120)
    last = server_get(direct, f"/sessions/{sid}")["last_seq"]
    wait(lambda: f"Events ({last})" in texts("#activity [role=tab]"), f"the events tab counting all {last} events")
    ok("the page has every event after the gap")
    same_as_a_fresh_load()
    ok("the live run's final page equals a fresh load's after drops and a gap")
    # The requests the drops cut are logged as failed loads; nothing else may be.
    bad = [l for l in D.get_log("browser") if l["level"] == "SEVERE" and "net::ERR_" not in l["message"] and "Failed to fetch" not in l["message"]]
    assert not bad, f"the page logged errors: {bad}"


SCENARIOS = {
    "spending": spending,
    "run": run_and_watch,
    "question": answer_question_by_keyboard,
    "tool": approve_tool_call,
    "plan": reject_and_edit_plan,
    "fork": scrub_and_fork,
    "failed": failed_step,
    "signout": sign_out_and_in,
    "wrongkey": wrong_key,
    "reacttimeline": react_timeline,
    "ask": ask_user_on_a_narrow_window,
    "skipped": steps_that_can_never_run,
    "denied": denied_approval,
    "counts": event_counts_agree,
    "timeline": session_timeline,
    "evals": eval_runs,
    "inspector": model_call_inspector,
    "compare": compare_fork,
    "graph1000": graph_1000,
    "live200": live_200,
    "livedrop": live_dropped,
}

D = browser()
try:
    SCENARIOS[SCENARIO]()
finally:
    D.quit()
