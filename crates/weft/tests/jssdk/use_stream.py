"""The `useStream` chat page (chat.jsx, bundled into PAGE_DIR) in headless Chromium through
WebDriver (selenium and Chromium from scripts/setup-browser), against a running `weft serve`.

    use_stream.py API_URL KEY PAGE_DIR PAGE_PORT WORKDIR

PAGE_DIR is served on 127.0.0.1:PAGE_PORT (another origin than the API's). The agent is
`banker` (crates/weft/tests/it/jssdk.rs): a balance lookup, then a transfer that waits for
approval, then the answer; its transfers are appended to WORKDIR/transfer.log. Each check that
holds prints `ok: <check>`; the first that does not raises, with what the page showed.
"""

import functools
import http.server
import os
import sys
import tempfile
import threading
import urllib.parse

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

API, KEY, PAGE_DIR, PAGE_PORT, WORK = sys.argv[1:6]
ANSWER = "Moved 10 to savings; the balance was 120."


def ok(what):
    print(f"ok: {what}", flush=True)


def serve_page():
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=PAGE_DIR)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", int(PAGE_PORT)), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ["WEFT_TEST_CHROMIUM"]
    for a in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tempfile.mkdtemp(prefix='weft-chromium-')}",
    ]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(os.environ["WEFT_TEST_CHROMEDRIVER"]), options=opts)
    d.set_page_load_timeout(30)
    return d


def transfers():
    try:
        with open(os.path.join(WORK, "transfer.log"), encoding="utf-8") as f:
            return [line for line in f if line.strip()]
    except FileNotFoundError:
        return []


def main():
    httpd = serve_page()
    d = browser()

    def shown():
        body = d.find_element(By.TAG_NAME, "body").text
        logs = "\n".join(e["message"] for e in d.get_log("browser"))
        return f"the page showed:\n{body}\nthe browser's console:\n{logs}"

    def wait(cond, what, timeout=30):
        try:
            return WebDriverWait(d, timeout).until(lambda _: cond())
        except TimeoutException:
            raise AssertionError(f"{what}; {shown()}") from None

    def texts(css):
        return [e.text for e in d.find_elements(By.CSS_SELECTOR, css)]

    try:
        query = urllib.parse.urlencode({"api": API, "key": KEY, "assistant": "banker"})
        d.get(f"http://127.0.0.1:{PAGE_PORT}/index.html?{query}")
        wait(lambda: d.find_elements(By.ID, "draft"), "the chat never rendered")
        d.find_element(By.ID, "draft").send_keys("Move 10 to savings")
        d.find_element(By.ID, "send").click()

        wait(
            lambda: any(t.startswith("calls balance(") for t in texts(".tool-call")),
            "the balance tool call is not shown",
        )
        wait(
            lambda: any("balance returned" in t and "120" in t for t in texts(".tool-result")),
            "the balance tool's result is not shown",
        )
        ok("the tool call and its result are shown")

        question = wait(
            lambda: d.find_elements(By.ID, "question") and d.find_element(By.ID, "question").text,
            "no interrupt is shown",
        )
        assert question.startswith("Allow the call transfer"), question
        assert any(t.startswith("calls transfer(") for t in texts(".tool-call")), shown()
        assert transfers() == [], "the transfer ran before it was approved"
        assert not d.find_elements(By.ID, "error"), shown()
        ok("the interrupt's question is shown")

        d.find_element(By.ID, "approve").click()
        wait(
            lambda: any(t.endswith(ANSWER) for t in texts("li.ai")),
            "the final answer is not shown after the approval",
        )
        wait(lambda: not d.find_elements(By.ID, "interrupt"), "the interrupt stays shown")
        wait(lambda: d.find_element(By.ID, "status").text == "idle", "the stream never ended")
        assert any("transfer returned" in t and "10" in t for t in texts(".tool-result")), shown()
        assert len(transfers()) == 1, transfers()
        assert not d.find_elements(By.ID, "error"), shown()
        ok("approved: the transfer ran once and the final answer is shown")

        seen = d.execute_script("return window.weftSeen")
        partial = [s for s in seen if s and s != ANSWER and ANSWER.startswith(s)]
        assert partial, f"the answer was never shown in part: {seen}"
        ok("the answer was shown as it streamed")
    finally:
        d.quit()
        httpd.shutdown()


main()
