#!/usr/bin/env python3
"""A small MCP server over stdio for weft's examples (Python's standard library only): notes kept
in `notes.jsonl` in the directory it runs in, with two tools, `add_note` and `list_notes`.

It speaks the Model Context Protocol's stdio transport (one JSON-RPC 2.0 message per line):
`initialize`, `tools/list` and `tools/call`; notifications need no answer. Any MCP client can
use it, as any MCP server can be given to weft (see docs/mcp.md).
"""
import json
import os
import sys

NOTES = os.path.join(os.getcwd(), "notes.jsonl")

TOOLS = [
    {
        "name": "add_note",
        "description": "Keep a note (a short text) for later.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "What to note."}},
            "required": ["text"],
        },
    },
    {
        "name": "list_notes",
        "description": "Every note kept so far, oldest first.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]


def notes():
    if not os.path.exists(NOTES):
        return []
    with open(NOTES, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def call(name, args):
    """A tool's result as MCP content, and whether it is an error."""
    if name == "add_note":
        text = args.get("text")
        if not isinstance(text, str) or not text.strip():
            return "`text` must be a non-empty string", True
        with open(NOTES, "a", encoding="utf-8") as f:
            f.write(json.dumps({"text": text}) + "\n")
        return json.dumps({"kept": text, "notes": len(notes())}), False
    if name == "list_notes":
        return json.dumps({"notes": notes()}), False
    return f"no tool `{name}`: use add_note or list_notes", True


def answer(msg):
    method = msg.get("method")
    params = msg.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "notes", "version": "1.0.0"},
        }
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        text, error = call(params.get("name"), params.get("arguments") or {})
        return {"content": [{"type": "text", "text": text}], "isError": error}
    if method == "ping":
        return {}
    raise LookupError(method)


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "id" not in msg:
            continue  # a notification
        try:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": answer(msg)}
        except LookupError as e:
            reply = {"jsonrpc": "2.0", "id": msg["id"],
                     "error": {"code": -32601, "message": f"method not found: {e}"}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
