#!/usr/bin/env python3
"""The MCP server (stdio) weft starts for one AgentDojo run: the run's suite's tools over the
run's environment, for one (user task, injection task or none) pair.

It speaks MCP's stdio transport by hand (one JSON-RPC 2.0 message a line: `initialize`,
`tools/list`, `tools/call`, `ping`; notifications get no answer) with Python's standard library
only, and relays the tool list and each call to the harness's service (`service.py`), which holds
the environment: so it starts in milliseconds, where importing agentdojo (or the `mcp` package)
in every run's server would take seconds.

    mcp_relay.py --service http://127.0.0.1:PORT --run RUN_ID
"""

import argparse
import json
import sys
import urllib.error
import urllib.request


def post(url, body):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")
        raise RuntimeError(f"the harness answered {e.code} to {url}: {detail}") from None


def answer(base, msg):
    method = msg.get("method")
    params = msg.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "agentdojo", "version": "1.0.0"},
        }
    if method == "tools/list":
        return {"tools": post(f"{base}/tools/list", {})["tools"]}
    if method == "tools/call":
        out = post(
            f"{base}/tools/call",
            {"name": params.get("name"), "arguments": params.get("arguments") or {}},
        )
        return {"content": [{"type": "text", "text": out["text"]}], "isError": out["isError"]}
    if method == "ping":
        return {}
    raise LookupError(f"method not found: {method}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--service", required=True)
    p.add_argument("--run", required=True)
    a = p.parse_args()
    base = f"{a.service.rstrip('/')}/runs/{a.run}"
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
        except json.JSONDecodeError as e:
            reply = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": str(e)}}
            print(json.dumps(reply), flush=True)
            continue
        if "id" not in msg:
            continue
        try:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": answer(base, msg)}
        except LookupError as e:
            error = {"code": -32601, "message": str(e)}
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": error}
        except Exception as e:
            error = {"code": -32603, "message": str(e)}
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": error}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
