"""Drives `weft serve`'s AG-UI endpoint with the AG-UI protocol's own Python package
(`ag-ui-protocol`, pinned in scripts/setup-clients): inputs are built as `RunAgentInput` models,
and every event that comes back must validate as an AG-UI `Event`.
Usage: agui_client.py URL KEY
"""
import asyncio
import json
import sys
import uuid

import httpx
from pydantic import TypeAdapter
from ag_ui.core import Event, EventType, ResumeEntry, RunAgentInput, UserMessage

URL, KEY = sys.argv[1:3]
EVENTS = TypeAdapter(Event)


def ok(name):
    print(f"ok: {name}", flush=True)


async def run(h, agent, inp):
    body = inp.model_dump(mode="json", by_alias=True, exclude_none=True)
    events = []
    async with h.stream("POST", f"/ag-ui/{agent}", json=body) as res:
        assert res.status_code == 200, (res.status_code, await res.aread())
        assert res.headers["content-type"].startswith("text/event-stream"), res.headers
        async for line in res.aiter_lines():
            if line.startswith("data: "):
                events.append(EVENTS.validate_python(json.loads(line[6:])))
    return events


def new_input(thread, text=None, resume=None):
    msgs = [UserMessage(id=str(uuid.uuid4()), content=text)] if text else []
    return RunAgentInput(thread_id=thread, run_id=str(uuid.uuid4()), messages=msgs,
                         tools=[], context=[], state={}, forwarded_props={}, resume=resume)


async def main():
    async with httpx.AsyncClient(base_url=URL, headers={"x-api-key": KEY}, timeout=60) as h:
        # A ReAct run: the tool call and its result, then the answer as a text message.
        thread = str(uuid.uuid4())
        evs = await run(h, "echoer", new_input(thread, "shout hello"))
        types = [e.type for e in evs]
        assert types[0] == EventType.RUN_STARTED and evs[0].thread_id == thread, types
        for t in ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
                  "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]:
            assert EventType[t] in types, (t, types)
        start = next(e for e in evs if e.type == EventType.TOOL_CALL_START)
        result = next(e for e in evs if e.type == EventType.TOOL_CALL_RESULT)
        assert start.tool_call_name == "shout" and result.tool_call_id == start.tool_call_id
        assert json.loads(result.content)["output"] == {"shouted": "LOUD"}, result
        text = "".join(e.delta for e in evs if e.type == EventType.TEXT_MESSAGE_CONTENT)
        assert text == "Shouted: LOUD", text
        last = evs[-1]
        assert last.type == EventType.RUN_FINISHED and last.outcome.type == "success", last
        ok("ag-ui: a tool call and the answer")

        # A plan run that waits: RUN_FINISHED with an interrupt; the next input resumes it.
        thread = str(uuid.uuid4())
        evs = await run(h, "ask", new_input(thread, "refund c1"))
        types = [e.type for e in evs]
        # The wave and its step started; the step waits for the amount.
        assert types.count(EventType.STEP_STARTED) == 2, types
        last = evs[-1]
        assert last.type == EventType.RUN_FINISHED and last.outcome.type == "interrupt", last
        intr = last.outcome.interrupts[0]
        assert intr.message == "How much should be refunded?" and intr.reason == "missing_input", intr
        evs = await run(h, "ask", new_input(thread, resume=[
            ResumeEntry(interrupt_id=intr.id, status="resolved", payload="50")]))
        types = [e.type for e in evs]
        # The step and its wave finish after the answer.
        assert types.count(EventType.STEP_FINISHED) == 2 and EventType.STATE_SNAPSHOT in types, types
        text = "".join(e.delta for e in evs if e.type == EventType.TEXT_MESSAGE_CONTENT)
        assert text == "Refunded 50 to c1.", (text, types)
        assert evs[-1].type == EventType.RUN_FINISHED and evs[-1].outcome.type == "success", evs[-1]
        ok("ag-ui: an interrupt resumed")

        # A call refused as a repeat: a call like any other, whose result says it was blocked
        # and names the call it repeats (whose result stands for it).
        thread = str(uuid.uuid4())
        evs = await run(h, "repeater", new_input(thread, "post hi"))
        starts = [e for e in evs if e.type == EventType.TOOL_CALL_START]
        results = [e for e in evs if e.type == EventType.TOOL_CALL_RESULT]
        assert [s.tool_call_name for s in starts] == ["post", "post"], evs
        assert [r.tool_call_id for r in results] == [s.tool_call_id for s in starts], evs
        first, second = (json.loads(r.content) for r in results)
        assert first["output"] == {"posted": True}, first
        assert second["status"] == "blocked" and second["repeats"] == starts[0].tool_call_id, second
        assert evs[-1].type == EventType.RUN_FINISHED and evs[-1].outcome.type == "success", evs[-1]
        ok("ag-ui: a repeated call is shown blocked")

    async with httpx.AsyncClient(base_url=URL, timeout=10) as h:
        r = await h.post("/ag-ui/echoer", json=new_input(str(uuid.uuid4()), "x").model_dump(
            mode="json", by_alias=True, exclude_none=True))
        assert r.status_code == 401, r.status_code
    ok("ag-ui: a key is needed")


asyncio.run(main())
