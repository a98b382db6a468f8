"""A real model (llama.cpp's OpenAI-compatible server, `scripts/llm-server`) calls a Python
tool through weft, and the tool's result goes back to it."""

import json

import weft
from conftest import service


def test_a_real_model_calls_a_python_tool_and_gets_its_result_back():
    url = service("WEFT_TEST_OPENAI_BASE_URL")
    logged = []

    @weft.tool
    def log_word(word: str) -> dict:
        """Write one word to the log."""
        logged.append(word)
        return {"logged": word}

    agent = weft.Agent(
        "tiny",
        mode="react",
        model={"provider": "openai", "name": "smollm2", "base_url": url, "api_key": "none",
               "timeout": "600s", "max_tokens": 200, "temperature": 0, "tool_choice": "auto"},
        instructions="Always use the log_word tool.",
        limits={"max_iterations": 2, "max_model_retries": 2},
        tools=[log_word],
    )
    events = []
    r = agent.run("Log the word 'apple'.", on_event=events.append)
    asked = [e for e in events if e.type == "model_replied"
             and any(c["name"] == "log_word" for c in e.data["reply"].get("tool_calls") or [])]
    assert asked, [(e.type, e.data) for e in events]
    call = asked[0].data["reply"]["tool_calls"][0]
    finished = [e for e in events if e.type == "tool_call_finished" and e.data["call_id"] == call["id"]]
    assert finished and finished[0].data["outcome"]["status"] == "ok", finished
    # The function ran with the model's arguments.
    assert logged and logged[0] == call["arguments"]["word"], (logged, call)
    # The result went back: a later model call was accepted.
    assert any(e.type == "model_replied" and e.seq > finished[0].seq for e in events), json.dumps(
        [(e.type, e.data) for e in events])[:2000]
    assert r.status in ("completed", "failed"), r
