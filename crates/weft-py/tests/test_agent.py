"""Agents from Python: runs, events, async, waits answered later, budgets, files, plans, and
errors with the `weft` command's messages."""

import asyncio
import json
import os
import threading

import pytest

import weft
from conftest import ROOT, calls, run_python, write_script


@weft.tool(idempotent=True)
def get_weather(city: str) -> dict:
    """Current weather for a city."""
    return {"city": city, "sky": "sunny" if city == "Lisbon" else "cloudy"}


def test_a_react_run_calls_python_tools_and_their_results_go_back(script):
    model = script([calls(("get_weather", {"city": "Lisbon"}), ("get_weather", {"city": "Oslo"})),
                    {"text": "Lisbon is sunnier."}])
    agent = weft.Agent("weather", model=model, mode="react", instructions="x", tools=[get_weather])
    assert agent.tool_names == ["get_weather"]
    stream = agent.stream("Lisbon or Oslo?")
    events = list(stream)
    r = stream.result
    assert r.completed and r.answer == "Lisbon is sunnier." and r.tool_calls == 2
    kinds = [e.type for e in events]
    assert kinds[0] == "session_started" and kinds[-1] == "run_finished"
    assert [e.seq for e in events if e.seq] == sorted(e.seq for e in events if e.seq)
    outputs = sorted(e.data["outcome"]["output"]["sky"] for e in events if e.type == "tool_call_finished")
    assert outputs == ["cloudy", "sunny"]
    # Stored: the session is in the store, as `weft sessions` reads it.
    assert os.path.exists(".weft/weft.db")


def test_async_tools_run_on_the_loop_of_arun_and_a_blocking_tool_does_not_stop_it(script):
    loops = []
    ticks = []

    @weft.tool
    async def fetch(url: str) -> str:
        """Fetches."""
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        return url.upper()

    @weft.tool
    def slow(seconds: float) -> str:
        """Blocks its thread."""
        import time
        time.sleep(seconds)
        return "slept"

    model = script([calls(("fetch", {"url": "a"}), ("slow", {"seconds": 0.6})), {"text": "ok"}])
    agent = weft.Agent("a", model=model, mode="react", instructions="x", tools=[fetch, slow])

    async def main():
        async def ticker():
            while True:
                ticks.append(1)
                await asyncio.sleep(0.02)
        t = asyncio.create_task(ticker())
        r = await agent.arun("go")
        t.cancel()
        return r, asyncio.get_running_loop()

    r, loop = asyncio.run(main())
    assert r.completed, r
    assert loops == [loop]
    # The loop went on while `slow` blocked its own thread for 0.6 s.
    assert len(ticks) >= 15, len(ticks)


def test_the_gil_is_released_while_weft_runs(script):
    model = script([calls(("get_weather", {"city": "Lisbon"}))] * 20 + [{"text": "done"}])
    agent = weft.Agent("g", model=model, mode="react", instructions="x", tools=[get_weather],
                       limits={"max_iterations": 30})
    counted = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counted[0] += 1

    t = threading.Thread(target=count)
    t.start()
    r = agent.run("go")
    stop.set()
    t.join()
    assert r.completed and r.tool_calls == 20
    assert counted[0] > 1000, counted[0]


def test_a_wait_is_answered_later_from_another_process(script, in_tmp):
    with open("tools.py", "w") as f:
        f.write('''
import weft
@weft.tool(approval=True)
def refund(order: str) -> str:
    """Refunds an order."""
    with open("refunds.log", "a") as f:
        f.write(order + "\\n")
    return "refunded " + order
''')
    model = script([calls(("refund", {"order": "o7"})), {"text": "Refunded o7."}])
    program = f'''
import sys, weft
sys.path.insert(0, ".")
from tools import refund
agent = weft.Agent("desk", model="{model}", mode="react", instructions="x", tools=[refund])
if sys.argv[1] == "ask":
    r = agent.run("refund o7")
else:
    r = agent.answer(sys.argv[2], "approve")
print(r.status, r.session_id, r.wait_kind, r.answer)
'''
    first = run_python(program, "ask")
    assert first.returncode == 0, first.stderr
    status, session, kind, _ = first.stdout.split(maxsplit=3)
    assert (status, kind) == ("waiting", "tool_approval")
    assert not os.path.exists("refunds.log")
    later = run_python(program, "answer", session)
    assert later.returncode == 0, later.stderr
    assert later.stdout.split(maxsplit=3)[0] == "completed", later.stdout
    assert open("refunds.log").read() == "o7\n"


def test_a_budget_stops_the_run_where_the_cli_would(script):
    model = script([calls(("get_weather", {"city": "Lisbon"}))] * 5 + [{"text": "done"}])
    agent = weft.Agent("b", model=model, mode="react", instructions="x", tools=[get_weather])
    r = agent.run("go", budget={"tool_calls": 2})
    assert r.status in ("waiting", "failed"), r
    assert r.tool_calls <= 2
    with pytest.raises(weft.WeftError, match=r"^--budget: "):
        agent.run("go", budget="bogus=1")


def test_errors_are_the_cli_messages(script, in_tmp):
    model = script([{"text": "hi"}] * 3)
    agent = weft.Agent("m", model=model, mode="react", instructions="x")
    r = agent.run("hello", id="fixed-id")
    assert r.completed
    with pytest.raises(weft.WeftError) as e:
        agent.run("hello", id="fixed-id")
    assert str(e.value) == "session fixed-id already exists: it has ended; give the new session another --id (or none, for a new one)"
    other = weft.Agent("other", model=model, mode="react", instructions="x")
    with pytest.raises(weft.WeftError, match="session fixed-id belongs to agent `m`, not `other`"):
        other.run("again", session="fixed-id")
    # A mistake in the agent names the file and the field, as `weft check` does.
    with open("bad.yaml", "w") as f:
        f.write("name: bad\nmode: react\nmodel: scripted:x.json\nlimits: {max_iterations: -1}\n")
    with pytest.raises(weft.WeftError, match=r"^agent file bad.yaml:4:"):
        weft.Agent.from_file("bad.yaml")
    # A store that cannot be opened is said when the agent is made.
    with pytest.raises(weft.WeftError, match=r"^cannot open the session store `nope://x`: "):
        weft.Agent("s", model=model, db="nope://x")
    with pytest.raises(TypeError, match="decorate the function with @weft.tool"):
        weft.Agent("t", model=model, tools=[lambda: 1])


def test_an_agent_file_gets_python_tools_beside_its_own(in_tmp):
    write_script("s.json", [calls(("echo", {"text": "hi"}), ("get_weather", {"city": "Oslo"})), {"text": "ok"}])
    with open("agent.yaml", "w") as f:
        f.write(
            "name: filed\nmode: react\nmodel: scripted:s.json\ninstructions: x\n"
            "allowed_tools: [echo, get_weather]\ntools:\n  - builtin: echo\n"
        )
    agent = weft.Agent.from_file("agent.yaml", tools=[get_weather])
    assert agent.tool_names == ["echo", "get_weather"]
    r = agent.run("go")
    assert r.completed and r.tool_calls == 2
    # The session records its agent file, as `weft run` does: `weft sessions show` names it.


def test_a_plan_runs_python_tools_in_waves_with_no_model():
    @weft.tool(idempotent=True)
    def price(item: str) -> float:
        """The price of an item."""
        return {"apple": 1.5, "pear": 2.0}[item]

    @weft.tool(idempotent=True)
    def total(prices: list) -> float:
        """Adds prices."""
        return sum(prices)

    plan = {
        "steps": [
            {"_id": "a", "_tool": "price", "item": "apple", "_outputPath": "†state.a"},
            {"_id": "p", "_tool": "price", "item": "†input.other", "_outputPath": "†state.p"},
            {"_id": "t", "_tool": "total", "prices": ["†state.a", "†state.p"], "_outputPath": "†state.t"},
        ],
    }
    events = []
    r = weft.plan.run(plan, tools=[price, total], input={"other": "pear"}, on_event=events.append)
    assert r.completed, r
    assert r.data == {"a": 1.5, "p": 2.0, "t": 3.5}
    # `a` and `p` ran in one wave, before `t`.
    started = [e.data for e in events if e.type == "wave_started"]
    assert len(started) == 2, [e.type for e in events]
    with pytest.raises(weft.WeftError, match=r"the plan has 1 problem\(s\):\n  - .*nope"):
        weft.plan.run({"steps": [{"_id": "x", "_tool": "nope"}]}, tools=[price])


def test_parallel_calls_of_a_blocking_tool_overlap(script):
    spans = []

    @weft.tool(idempotent=True)
    def wait(name: str) -> str:
        """Waits on I/O (the GIL released)."""
        import time
        start = time.monotonic()
        time.sleep(0.3)
        spans.append((start, time.monotonic()))
        return name

    model = script([calls(("wait", {"name": "a"}), ("wait", {"name": "b"}), ("wait", {"name": "c"})),
                    {"text": "ok"}])
    agent = weft.Agent("p", model=model, mode="react", instructions="x", tools=[wait])
    assert agent.run("go").completed
    spans.sort()
    # Each call began before the one before it ended: they ran at once, not one after another.
    assert all(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])), spans


def test_a_code_agent_takes_tool_declarations_beside_python_tools(script):
    model = script([calls(("echo", {"text": "hi"}), ("get_weather", {"city": "Oslo"})), {"text": "ok"}])
    agent = weft.Agent("mixed", model=model, mode="react", instructions="x",
                       tools=[{"builtin": "echo"}, get_weather])
    assert agent.tool_names == ["echo", "get_weather"]
    r = agent.run("go")
    assert r.completed and r.tool_calls == 2
