"""The harness's loopback HTTP service, in the driver's process: it holds each run's AgentDojo
case (its environment and the calls made so far) and serves both sides weft talks to.

- `POST /v1/chat/completions`: the compromised model (`compromised_model.py`); the request's
  `model` names the run.
- `POST /runs/RUN/tools/list` and `POST /runs/RUN/tools/call`: what the stdio MCP server of that
  run (`mcp_relay.py`) relays; calls run against the run's environment (`dojo_case.Case.call`).

The environment lives here rather than in the MCP server's process so that agentdojo is imported
once per benchmark, not once per run (importing it takes seconds: it brings every model
provider's client library); the MCP server weft starts is a small relay with the standard
library only.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import compromised_model
import dojo_case


class Run:
    def __init__(self, case: dojo_case.Case):
        self.case = case
        self.lock = threading.Lock()
        self.model_requests = 0
        self.script = compromised_model.Script(
            case.user_ground_truth(),
            case.injection_ground_truth(),
            case.injection_task.GOAL if case.injection_task is not None else None,
            case.user_task.GROUND_TRUTH_OUTPUT,
            case.user_task.PROMPT,
        )


class Service:
    def __init__(self) -> None:
        self.runs: dict[str, Run] = {}
        self.schemas: dict[str, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length) or b"{}")
                    status, answer = service.route(self.path, body)
                except Exception as e:  # a bad request is answered, never a dead thread
                    status, answer = 400, {"error": {"message": f"{type(e).__name__}: {e}"}}
                data = json.dumps(answer, default=str).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "Service":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, run_id: str, case: dojo_case.Case) -> Run:
        run = Run(case)
        with self.lock:
            self.runs[run_id] = run
            if case.suite_name not in self.schemas:
                self.schemas[case.suite_name] = dojo_case.tool_schemas(case.suite_name)
        return run

    def remove(self, run_id: str) -> None:
        with self.lock:
            self.runs.pop(run_id, None)

    def _run(self, run_id: str) -> Run:
        with self.lock:
            run = self.runs.get(run_id)
        if run is None:
            raise LookupError(f"no run `{run_id}` in this harness")
        return run

    def route(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if path.rstrip("/").endswith("/chat/completions"):
            run = self._run(str(body.get("model", "")))
            messages = body.get("messages")
            if not isinstance(messages, list):
                raise ValueError("`messages` must be a list")
            with run.lock:
                run.model_requests += 1
                reply = run.script.reply(messages)
            return 200, compromised_model.completion(str(body["model"]), reply)
        parts = path.strip("/").split("/")
        if len(parts) == 4 and parts[0] == "runs" and parts[2] == "tools":
            run = self._run(parts[1])
            if parts[3] == "list":
                return 200, {"tools": self.schemas[run.case.suite_name]}
            if parts[3] == "call":
                name = body.get("name")
                args = body.get("arguments") or {}
                if not isinstance(name, str) or not isinstance(args, dict):
                    raise ValueError("a call needs `name` (a string) and `arguments` (an object)")
                with run.lock:
                    text, is_error = run.case.call(name, args)
                return 200, {"text": text, "isError": is_error}
        return 404, {"error": {"message": f"no route {path}"}}
