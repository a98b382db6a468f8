"""Drives a running `weft serve` with the official langgraph-sdk client (pinned in
scripts/setup-clients). Usage: langgraph_client.py URL ALICE_KEY BOB_KEY WORKDIR [restart]

With `restart`, one streaming run spans a restart of the server: the script writes
WORKDIR/restart.now after the run's first tool call finished, the test restarts the server, and
the SDK reconnects by itself with the last event id it saw.

Each check prints `ok: NAME`; the first failed assertion ends the script with a traceback (exit 1).
The agents are the ones `crates/weft/tests/it/serve.rs` writes into WORKDIR.
"""
import asyncio
import json
import os
import sys
import time
import uuid

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError, AuthenticationError, ConflictError

URL, ALICE, BOB, WORK = sys.argv[1:5]
MODE = sys.argv[5] if len(sys.argv) > 5 else "all"


def user_msg(text):
    return {"messages": [{"role": "user", "content": text}]}


def ok(name):
    print(f"ok: {name}", flush=True)


async def collect(stream):
    return [(p.event, p.data) async for p in stream]


async def main():
    alice = get_client(url=URL, api_key=ALICE)
    bob = get_client(url=URL, api_key=BOB)

    # Assistants: one per agent file, found by name.
    found = await alice.assistants.search()
    names = sorted(a["assistant_id"] for a in found)
    assert names == ["ask", "echoer", "hold", "recaller", "rememberer", "repeater", "slowpoke", "stuck", "twice"], names
    assert (await alice.assistants.get("echoer"))["graph_id"] == "echoer"
    ok("assistants")

    # The graph: weft's agent loop, with a tools node for an agent that has tools.
    graph = await alice.assistants.get_graph("echoer")
    assert [n["id"] for n in graph["nodes"]] == ["__start__", "agent", "tools", "__end__"], graph
    edges = {(e["source"], e["target"]) for e in graph["edges"]}
    assert edges == {("__start__", "agent"), ("agent", "tools"), ("tools", "agent"), ("agent", "__end__")}, graph
    schemas = await alice.assistants.get_schemas("echoer")
    assert schemas["graph_id"] == "echoer" and "messages" in schemas["input_schema"]["properties"], schemas
    assert "answer" in schemas["state_schema"]["properties"], schemas
    try:
        await alice.assistants.get_graph("nope")
        raise AssertionError("a graph for an unknown assistant")
    except NotFoundError:
        pass
    ok("assistants graph and schemas")

    # Wait: the model's tool call ran (the tool's log) and its result went back (the answer).
    t = await alice.threads.create(metadata={"purpose": "wait"})
    assert t["status"] == "idle" and t["values"] is None, t
    out = await alice.runs.wait(t["thread_id"], "echoer", input=user_msg("shout hello"))
    assert out["answer"] == "Shouted: LOUD", out
    assert [m["type"] for m in out["messages"]] == ["human", "ai", "tool", "ai"], out
    assert "shout" in open(os.path.join(WORK, "tool.log")).read()
    thread = await alice.threads.get(t["thread_id"])
    assert thread["status"] == "idle" and thread["metadata"] == {"purpose": "wait"}, thread
    waited = t["thread_id"]
    ok("runs.wait")

    # Stream, every mode at once; ids are the session's sequence numbers, in order.
    t = await alice.threads.create()
    parts = await collect(alice.runs.stream(
        t["thread_id"], "echoer", input=user_msg("shout again"),
        stream_mode=["values", "updates", "messages-tuple", "custom"]))
    events = [e for e, _ in parts]
    assert events[0] == "metadata" and events[-1] == "end", events
    assert parts[-1][1]["status"] == "success", parts[-1]
    values = [d for e, d in parts if e == "values"]
    assert values[-1]["answer"] == "Shouted: LOUD", values[-1]
    updates = [d for e, d in parts if e == "updates"]
    assert any("tools" in u and u["tools"]["messages"][0]["status"] == "success" for u in updates), updates
    # The answer streams in pieces as the model generates it.
    msgs = [d for e, d in parts if e == "messages"]
    assert len(msgs) >= 2 and "".join(m[0]["content"] for m in msgs) == "Shouted: LOUD", msgs
    assert all(m[0]["type"] == "AIMessageChunk" for m in msgs), msgs
    custom = [d["type"] for e, d in parts if e == "custom"]
    for kind in ["turn_started", "model_replied", "tool_call_started", "tool_call_finished", "run_finished"]:
        assert kind in custom, (kind, custom)
    seqs = [d["seq"] for e, d in parts if e == "custom"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    for mode in ["values", "updates", "messages-tuple", "custom"]:
        t = await alice.threads.create()
        parts = await collect(alice.runs.stream(
            t["thread_id"], "echoer", input=user_msg("shout"), stream_mode=mode))
        kinds = {e for e, _ in parts} - {"metadata", "end"}
        want = {"messages-tuple": "messages"}.get(mode, mode)
        assert kinds == {want}, (mode, kinds)
    ok("runs.stream in each mode")

    # A wait is an interrupt; Command(resume=...) answers it.
    t = await alice.threads.create()
    out = await alice.runs.wait(t["thread_id"], "ask", input=user_msg("refund c1"))
    intr = out["__interrupt__"][0]["value"]
    assert intr["question"] == "How much should be refunded?" and intr["missing"] == ["amount"], out
    thread = await alice.threads.get(t["thread_id"])
    assert thread["status"] == "interrupted", thread
    state = await alice.threads.get_state(t["thread_id"])
    assert state["next"] == ["agent"] and state["tasks"][0]["interrupts"], state
    out = await alice.runs.wait(t["thread_id"], "ask", command={"resume": "50"})
    assert out["answer"] == "Refunded 50 to c1.", out
    assert "__interrupt__" not in out
    history = await alice.threads.get_history(t["thread_id"], limit=100)
    assert history[0]["values"]["answer"] == "Refunded 50 to c1.", history
    waits = [h for h in history if h["interrupts"]]
    assert len(waits) == 1 and waits[0]["next"] == ["agent"], history
    assert [x["id"] for x in waits[0]["tasks"]] == [x["id"] for x in state["tasks"]], (waits, state)
    ok("interrupt answered with Command(resume)")

    # Join after a dropped connection: read part of a run's stream, drop it, then join with the
    # last event id seen; together the two reads are the whole stream, nothing lost or repeated.
    t = await alice.threads.create()
    run = await alice.runs.create(t["thread_id"], "echoer", input=user_msg("shout slowly"),
                                  stream_mode="custom")
    whole = await collect(alice.runs.join_stream(t["thread_id"], run["run_id"], stream_mode="custom"))
    whole_seqs = [d["seq"] for e, d in whole if e == "custom"]
    assert len(whole_seqs) >= 5, whole
    t = await alice.threads.create()
    run = await alice.runs.create(t["thread_id"], "echoer", input=user_msg("shout slowly"),
                                  stream_mode="custom")
    first = []
    async with httpx.AsyncClient(base_url=URL, headers={"x-api-key": ALICE}, timeout=30) as h:
        async with h.stream("GET", f"/threads/{t['thread_id']}/runs/{run['run_id']}/stream",
                            params={"stream_mode": "custom"}) as res:
            last_id = None
            async for line in res.aiter_lines():
                if line.startswith("id: "):
                    last_id = line[4:]
                    # An id is `SEQ-PART`: the event's sequence number, and which of its parts.
                    first.append(int(last_id.split("-")[0]))
                if len(first) == 2:
                    break  # the connection drops here
    rest = await collect(alice.runs.join_stream(
        t["thread_id"], run["run_id"], stream_mode="custom", last_event_id=last_id))
    rest_seqs = [d["seq"] for e, d in rest if e == "custom"]
    assert rest[-1][0] == "end", rest
    assert first + rest_seqs == list(range(first[0], first[0] + len(first) + len(rest_seqs))), (first, rest_seqs)
    assert len(first) + len(rest_seqs) == len(whole_seqs), (first, rest_seqs, whole_seqs)
    joined = await alice.runs.join(t["thread_id"], run["run_id"])
    assert joined["answer"] == "Shouted: LOUD", joined
    got = await alice.runs.get(t["thread_id"], run["run_id"])
    assert got["status"] == "success", got
    # A replay has no live pieces of text: it gets the answer whole, once.
    replay = await collect(alice.runs.join_stream(t["thread_id"], run["run_id"], stream_mode="messages-tuple"))
    texts = [d[0]["content"] for e, d in replay if e == "messages"]
    assert texts == ["Shouted: LOUD"], replay
    ok("join with Last-Event-ID after a dropped connection")

    # join_stream with the SDK's default arguments (it sends an empty `stream_mode=`): the
    # default mode, values; an unknown run is 404 whatever the modes.
    default = await collect(alice.runs.join_stream(t["thread_id"], run["run_id"]))
    values = [d for e, d in default if e == "values"]
    assert default[-1][0] == "end" and values and values[-1]["answer"] == "Shouted: LOUD", default
    try:
        await collect(alice.runs.join_stream(t["thread_id"], str(uuid.uuid4()), stream_mode="valuez"))
        raise AssertionError("a join of an unknown run was answered")
    except httpx.HTTPStatusError as e:
        assert e.response.status_code == 404, e.response.text
    ok("join_stream with default arguments")

    # Cancel: the run stops and ends `interrupted` (as LangGraph's server reports a run cancelled
    # by request), its thread `idle`; a second run on the busy thread is refused.
    t = await alice.threads.create()
    run = await alice.runs.create(t["thread_id"], "stuck", input=user_msg("wait forever"))
    began = time.time()
    while not os.path.exists(os.path.join(WORK, "stuck.started")):
        assert time.time() - began < 30, "the stuck tool never started"
        await asyncio.sleep(0.05)
    try:
        await alice.runs.create(t["thread_id"], "stuck", input=user_msg("again"))
        raise AssertionError("a second run on a busy thread was accepted")
    except ConflictError:
        pass
    await alice.runs.cancel(t["thread_id"], run["run_id"], wait=True)
    got = await alice.runs.get(t["thread_id"], run["run_id"])
    assert got["status"] == "interrupted", got
    assert [r["status"] for r in await alice.runs.list(t["thread_id"])] == ["interrupted"]
    thread = await alice.threads.get(t["thread_id"])
    assert thread["status"] == "idle", thread
    ok("cancel")

    # multitask_strategy enqueue: a second run on a busy thread waits for the first, then runs.
    t = await alice.threads.create()
    first = await alice.runs.create(t["thread_id"], "twice", input=user_msg("one"))
    second = await alice.runs.create(t["thread_id"], "twice", input=user_msg("two"),
                                     multitask_strategy="enqueue")
    assert second["status"] == "pending", second
    out = await alice.runs.join(t["thread_id"], second["run_id"])
    said = [m["content"] for m in out["messages"] if m["type"] == "human" or (m["type"] == "ai" and not m["tool_calls"])]
    assert said == ["one", "Once.", "two", "Twice."], out
    assert (await alice.runs.get(t["thread_id"], first["run_id"]))["status"] == "success"
    ok("multitask enqueue")

    # A body over the limit is refused before anything runs.
    # (The server closes the connection after refusing a body it did not read: that request gets a
    # client of its own, so the next requests do not reuse the closed connection.)
    async with httpx.AsyncClient(base_url=URL, headers={"x-api-key": ALICE}, timeout=10) as h:
        r = await h.post("/threads", content=b'{"metadata": {"x": "' + b"a" * (2 << 20) + b'"}}',
                         headers={"content-type": "application/json"})
        assert r.status_code == 413 and "detail" in r.json(), r.status_code
    async with httpx.AsyncClient(base_url=URL, headers={"x-api-key": ALICE}, timeout=10) as h:
        r = await h.post("/threads", content=b"{not json", headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500 and "detail" in r.json(), (r.status_code, r.text)
        r = await h.post(f"/threads/{t['thread_id']}/runs/wait", json={"input": {}})
        assert r.status_code == 422 and "assistant_id" in r.json()["detail"], (r.status_code, r.text)
    ok("body limit")

    # Keys and users: no key is 401; another user's thread is 404 and not listed.
    async with httpx.AsyncClient(base_url=URL, timeout=10) as h:
        r = await h.post("/threads", json={})
        assert r.status_code == 401 and "API key" in r.json()["detail"], r.text
        r = await h.get("/health")
        assert r.status_code == 200, r.text
    try:
        await get_client(url=URL, api_key="not-a-key-at-all-000").threads.create()
        raise AssertionError("a wrong key was accepted")
    except AuthenticationError:
        pass
    try:
        await bob.threads.get(t["thread_id"])
        raise AssertionError("bob read alice's thread")
    except NotFoundError:
        pass
    try:
        await bob.runs.wait(t["thread_id"], "echoer", input=user_msg("hi"))
        raise AssertionError("bob ran on alice's thread")
    except (NotFoundError, httpx.HTTPStatusError) as e:
        # runs.wait reports the status through httpx rather than the SDK's own errors.
        status = getattr(getattr(e, "response", None), "status_code", 404)
        assert status == 404, e
    assert await bob.threads.search() == []
    assert len(await alice.threads.search(limit=100)) >= 8
    ok("keys and users")

    # threads.search by metadata: only the threads whose metadata holds every key given.
    found = await alice.threads.search(metadata={"purpose": "wait"}, limit=100)
    assert [f["thread_id"] for f in found] == [waited], found
    assert await alice.threads.search(metadata={"purpose": "other"}) == []
    assert await bob.threads.search(metadata={"purpose": "wait"}) == []
    found = await alice.threads.search(metadata={"purpose": "wait"}, status="idle")
    assert [f["thread_id"] for f in found] == [waited], found
    assert await alice.threads.search(metadata={"purpose": "wait"}, offset=1) == []
    ok("threads.search by metadata")

    # Counts: assistants (by graph id) and the user's threads (by metadata, status, values).
    assert await alice.assistants.count() == 9
    assert await alice.assistants.count(graph_id="echoer") == 1
    assert await alice.assistants.count(graph_id="nope") == 0
    mine = len(await alice.threads.search(limit=1000))
    assert await alice.threads.count() == mine and mine >= 8, mine
    assert await alice.threads.count(metadata={"purpose": "wait"}) == 1
    # The cancelled thread is idle, not in error (as LangGraph's server counts it).
    assert await alice.threads.count(status="error") == 0
    for status in ["idle", "interrupted"]:
        listed = await alice.threads.search(status=status, limit=1000)
        assert await alice.threads.count(status=status) == len(listed), status
    assert await alice.threads.count(values={"answer": "Twice."}) == 1
    assert await bob.threads.count() == 0
    ok("counts")

    # Metrics: the runs above, counted; a key is needed.
    async with httpx.AsyncClient(base_url=URL, timeout=10) as h:
        assert (await h.get("/metrics")).status_code == 401
        r = await h.get("/metrics", headers={"x-api-key": ALICE})
        assert r.status_code == 200, r.text
        lines = r.text.splitlines()

        def value(prefix):
            return sum(float(l.split()[-1]) for l in lines if l.startswith(prefix))

        assert value('weft_runs_total{status="success"}') >= 5, r.text
        assert value('weft_runs_total{status="interrupted"}') >= 1, r.text
        assert value('weft_tool_calls_total{outcome="ok"}') >= 5, r.text
        assert value("weft_run_duration_seconds_count") >= 7, r.text
        assert "weft_runs_active" in r.text and "weft_model_tokens_total" in r.text, r.text
    ok("metrics")

    # The OpenAPI document: every route the client used, with the request schemas generated
    # from the server's own types.
    async with httpx.AsyncClient(base_url=URL, headers={"x-api-key": ALICE}, timeout=10) as h:
        doc = (await h.get("/openapi.json")).json()
        assert doc["openapi"].startswith("3."), doc
        paths = doc["paths"]
        for path, method in [("/threads", "post"), ("/threads/{tid}/runs/stream", "post"),
                             ("/threads/{tid}/runs/{rid}/stream", "get"), ("/assistants/search", "post"),
                             ("/threads/{tid}/history", "post"), ("/ag-ui/{agent}", "post"), ("/health", "get")]:
            assert method in paths.get(path, {}), (path, method, sorted(paths))
        body = paths["/threads/{tid}/runs/stream"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert "assistant_id" in body["properties"] and "command" in body["properties"], body
        assert "get" in paths["/info"], sorted(paths)
        agui = paths["/ag-ui/{agent}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert "threadId" in agui["properties"] and "runId" in agui["properties"], agui
    ok("openapi")

    # /info, as LangGraph Server answers it: the version and the feature flags; no key is needed
    # (LangGraph's clients ask it first), and the same answer with one.
    async with httpx.AsyncClient(base_url=URL, timeout=10) as h:
        r = await h.get("/info")
        assert r.status_code == 200, r.text
        info = r.json()
        assert info["version"] and info["flags"] == {"assistants": True, "crons": True, "langsmith": False}, info
        assert (await h.get("/info", headers={"x-api-key": ALICE})).json() == info
    ok("info")


async def restart():
    alice = get_client(url=URL, api_key=ALICE)
    t = await alice.threads.create()
    seqs, kinds, last, signalled = [], [], None, False
    async for part in alice.runs.stream(t["thread_id"], "slowpoke", input=user_msg("three slow steps"),
                                        stream_mode="custom"):
        if part.event == "custom":
            seqs.append(part.data["seq"])
            kinds.append(part.data["type"])
            if part.data["type"] == "tool_call_finished" and not signalled:
                open(os.path.join(WORK, "restart.now"), "w").close()
                signalled = True
        elif part.event in ("end", "error"):
            last = part
    assert last is not None and last.event == "end" and last.data["status"] == "success", (last, kinds, seqs)
    # Nothing lost, nothing repeated: the ids run on without a gap across the restart.
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    assert kinds.count("tool_call_finished") == 3 and kinds[-1] == "run_finished", kinds
    assert os.path.exists(os.path.join(WORK, "restarted")), "the server was not restarted"
    state = await alice.threads.get_state(t["thread_id"])
    assert state["values"]["answer"] == "All three done.", state
    ok("a streaming run across a server restart")


async def resume():
    """A stream in four modes at once, cut after each of its parts in turn: a join with that
    part's id as Last-Event-ID sends exactly the parts that followed it, and the answer's text
    goes on from where the client's pieces stopped (never again from the start)."""
    alice = get_client(url=URL, api_key=ALICE)
    t = await alice.threads.create()
    modes = ["values", "updates", "messages-tuple", "custom"]
    whole = [p async for p in alice.runs.stream(t["thread_id"], "echoer", input=user_msg("shout"),
                                                stream_mode=modes)]
    run_id = whole[0].data["run_id"]
    body = [p for p in whole if p.event not in ("metadata", "end")]
    ids = [p.id for p in body]
    assert all(ids) and len(set(ids)) == len(ids), ids

    def text(parts):
        return "".join(p.data[0]["content"] for p in parts if p.event == "messages")

    def others(parts):
        return [(p.event, p.data) for p in parts if p.event != "messages"]

    assert text(body) == "Shouted: LOUD", body
    assert sum(p.event == "messages" for p in body) >= 2, body
    for i, p in enumerate(body):
        rest = [q async for q in alice.runs.join_stream(t["thread_id"], run_id, stream_mode=modes,
                                                        last_event_id=p.id)]
        assert rest and rest[-1].event == "end", (p.id, rest)
        rest = [q for q in rest[:-1] if q.event]
        assert others(rest) == others(body[i + 1:]), (p.id, [q.id for q in rest], ids[i + 1:])
        assert text(body[:i + 1]) + text(rest) == "Shouted: LOUD", (p.id, ids, text(rest))
    ok("a stream resumes after any of its parts")


async def wait_restart():
    """runs.wait spans a restart of the server: the SDK follows the answer's Location to the
    run's join on the next server. The runs are listed from the log after the restart."""
    alice = get_client(url=URL, api_key=ALICE)
    # Two runs on one thread before the restart, listed after it.
    t2 = await alice.threads.create()
    one = await alice.runs.create(t2["thread_id"], "twice", input=user_msg("one"),
                                  metadata={"origin": "before-restart"})
    await alice.runs.join(t2["thread_id"], one["run_id"])
    two = await alice.runs.create(t2["thread_id"], "twice", input=user_msg("two"))
    await alice.runs.join(t2["thread_id"], two["run_id"])
    t = await alice.threads.create()

    async def signal():
        while not os.path.exists(os.path.join(WORK, "slow.log")):
            await asyncio.sleep(0.05)
        open(os.path.join(WORK, "restart.now"), "w").close()

    sig = asyncio.create_task(signal())
    created = []
    out = await alice.runs.wait(t["thread_id"], "slowpoke", input=user_msg("three slow steps"),
                                on_run_created=created.append)
    await sig
    assert os.path.exists(os.path.join(WORK, "restarted")), "the server was not restarted"
    assert out["answer"] == "All three done.", out
    assert created and created[0]["thread_id"] == t["thread_id"], created
    ok("runs.wait across a server restart")

    runs = await alice.runs.list(t["thread_id"])
    assert [r["run_id"] for r in runs] == [created[0]["run_id"]], runs
    assert runs[0]["status"] == "success" and runs[0]["assistant_id"] == "slowpoke", runs
    runs = await alice.runs.list(t2["thread_id"])
    assert [r["run_id"] for r in runs] == [two["run_id"], one["run_id"]], runs
    assert [r["status"] for r in runs] == ["success", "success"], runs
    # The metadata a run was created with is in its marker in the log, so a server that did
    # not start the run lists it with it (a cron's run keeps its cron_id).
    assert runs[1]["metadata"].get("origin") == "before-restart", runs[1]
    got = await alice.runs.get(t2["thread_id"], one["run_id"])
    assert got["metadata"].get("origin") == "before-restart", got
    runs = await alice.runs.list(t2["thread_id"], limit=1)
    assert [r["run_id"] for r in runs] == [two["run_id"]], runs
    runs = await alice.runs.list(t2["thread_id"], limit=1, offset=1)
    assert [r["run_id"] for r in runs] == [one["run_id"]], runs
    assert await alice.runs.list(t2["thread_id"], status="error") == []
    assert len(await alice.runs.list(t2["thread_id"], status="success")) == 2
    ok("runs.list from the log after a restart, with limit, offset, status and each run's metadata")


async def body_limit():
    """Bodies over the limit, on one async client (the SDK's): each is answered 413 with a JSON
    detail, and the client's next request works."""
    async with httpx.AsyncClient(base_url=URL, headers={"x-api-key": ALICE}, timeout=30) as h:
        for size in [20 << 20] * 10 + [3 << 20] * 10:
            r = await h.post("/threads", content=b'{"metadata": {"x": "' + b"a" * size + b'"}}',
                             headers={"content-type": "application/json"})
            assert r.status_code == 413 and "detail" in r.json(), (size, r.status_code, r.text)
            assert r.headers.get("connection") == "close", r.headers
            r = await h.post("/threads", json={})
            assert r.status_code == 200, (r.status_code, r.text)
    ok("bodies over the limit are refused cleanly")


async def tools():
    """Tool calls as chat UIs read them: the model's reply with its tool calls (an `ai` message
    with `tool_calls`), the call's result (a `tool` message naming its call), then the answer, in
    the thread's `values.messages` and in LangGraph's `updates` shape."""
    alice = get_client(url=URL, api_key=ALICE)
    t = await alice.threads.create()
    parts = await collect(alice.runs.stream(t["thread_id"], "echoer", input=user_msg("shout"),
                                            stream_mode=["updates", "values"]))
    updates = [d for e, d in parts if e == "updates"]
    nodes = [next(iter(u)) for u in updates]
    assert nodes == ["agent", "tools", "agent"], updates
    asked = updates[0]["agent"]["messages"]
    assert len(asked) == 1 and asked[0]["type"] == "ai", asked
    call = asked[0]["tool_calls"]
    assert len(call) == 1 and call[0]["name"] == "shout" and call[0]["type"] == "tool_call", call
    assert call[0]["id"] and call[0]["args"] == {}, call
    result = updates[1]["tools"]["messages"]
    assert len(result) == 1 and result[0]["type"] == "tool", result
    assert result[0]["tool_call_id"] == call[0]["id"] and result[0]["name"] == "shout", result
    assert result[0]["status"] == "success" and json.loads(result[0]["content"]) == {"shouted": "LOUD"}, result
    answer = updates[2]["agent"]["messages"]
    assert [(m["type"], m["content"], m["tool_calls"]) for m in answer] == [("ai", "Shouted: LOUD", [])], answer
    last = [d for e, d in parts if e == "values"][-1]["messages"]
    assert [m["type"] for m in last] == ["human", "ai", "tool", "ai"], last
    assert last[0]["content"] == "shout", last
    assert last[1]["tool_calls"] == call and last[2]["tool_call_id"] == call[0]["id"], last
    assert last[2] == result[0] and last[3] == answer[0], (last, result, answer)
    assert len({m["id"] for m in last}) == 4, last
    # The thread's state, and runs.wait, say the same.
    state = await alice.threads.get_state(t["thread_id"])
    assert state["values"]["messages"] == last, state["values"]["messages"]
    # The answer's streamed pieces carry the id its message has in the values.
    t = await alice.threads.create()
    parts = await collect(alice.runs.stream(t["thread_id"], "echoer", input=user_msg("shout"),
                                            stream_mode=["messages-tuple", "values"]))
    chunks = [d[0] for e, d in parts if e == "messages"]
    final = [d for e, d in parts if e == "values"][-1]["messages"]
    assert "".join(c["content"] for c in chunks) == "Shouted: LOUD", chunks
    assert {c["id"] for c in chunks} == {final[-1]["id"]}, (chunks, final)
    # A second turn, started as soon as the stream of the first ended (not refused as busy),
    # follows the first in the messages.
    t = await alice.threads.create()
    parts = await collect(alice.runs.stream(t["thread_id"], "twice", input=user_msg("one"),
                                            stream_mode="values"))
    assert parts[-1][0] == "end", parts
    first = [d for e, d in parts if e == "values"][-1]["messages"]
    out = await alice.runs.wait(t["thread_id"], "twice", input=user_msg("two"))
    assert [m["type"] for m in out["messages"]] == ["human", "ai", "tool", "ai"] * 2, out
    assert out["messages"][:4] == first, (out["messages"], first)
    assert [m["content"] for m in out["messages"] if m["type"] == "tool"] == ["{}", "{}"], out
    ok("tool calls and tool messages in values and updates")


async def threads_api():
    """threads.update (a metadata merge), threads.copy (a fork at the head) and threads.delete
    (the session and its runs; a busy thread refused), each for its owner only."""
    alice = get_client(url=URL, api_key=ALICE)
    bob = get_client(url=URL, api_key=BOB)
    t = await alice.threads.create(metadata={"a": 1, "b": "x", "gone": True})
    tid = t["thread_id"]
    updated = await alice.threads.update(tid, metadata={"b": "y", "c": True, "gone": None})
    assert updated["metadata"] == {"a": 1, "b": "y", "c": True}, updated
    assert (await alice.threads.get(tid))["metadata"] == {"a": 1, "b": "y", "c": True}
    try:
        await bob.threads.update(tid, metadata={"b": "bob"})
        raise AssertionError("bob updated alice's thread")
    except NotFoundError:
        pass
    assert [f["thread_id"] for f in await alice.threads.search(metadata={"b": "y"})] == [tid]
    assert await alice.threads.search(metadata={"b": "x"}) == []
    assert await alice.threads.count(metadata={"c": True}) == 1
    ok("threads.update")

    await alice.runs.wait(tid, "twice", input=user_msg("one"))
    copy = await alice.threads.copy(tid)
    cid = copy["thread_id"]
    assert cid != tid and copy["metadata"]["b"] == "y", copy
    said = lambda ms: [(m["type"], m["content"]) for m in ms]
    original = (await alice.threads.get_state(tid))["values"]
    assert said(copy["values"]["messages"]) == said(original["messages"]), (copy, original)
    assert copy["values"]["answer"] == "Once." and copy["status"] == "idle", copy
    # The copy goes on by itself: a new turn there leaves the original as it was.
    await alice.runs.wait(cid, "twice", input=user_msg("two"))
    assert len((await alice.threads.get_state(cid))["values"]["messages"]) == 8
    assert (await alice.threads.get_state(tid))["values"] == original
    try:
        await bob.threads.copy(tid)
        raise AssertionError("bob copied alice's thread")
    except NotFoundError:
        pass
    empty = await alice.threads.create(metadata={"empty": True})
    copied = await alice.threads.copy(empty["thread_id"])
    assert copied["thread_id"] != empty["thread_id"] and copied["values"] is None, copied
    assert copied["metadata"] == {"empty": True}, copied
    ok("threads.copy")

    busy = await alice.threads.create()
    run = await alice.runs.create(busy["thread_id"], "hold", input=user_msg("wait forever"))
    began = time.time()
    while not os.path.exists(os.path.join(WORK, "hold.started")):
        assert time.time() - began < 30, "the hold tool never started"
        await asyncio.sleep(0.05)
    try:
        await alice.threads.delete(busy["thread_id"])
        raise AssertionError("a busy thread was deleted")
    except ConflictError:
        pass
    try:
        await alice.threads.copy(busy["thread_id"])
        raise AssertionError("a busy thread was copied")
    except ConflictError:
        pass
    await alice.runs.cancel(busy["thread_id"], run["run_id"], wait=True)
    try:
        await bob.threads.delete(busy["thread_id"])
        raise AssertionError("bob deleted alice's thread")
    except NotFoundError:
        pass
    before = await alice.threads.count()
    for gone in [busy["thread_id"], tid]:
        await alice.threads.delete(gone)
        try:
            await alice.threads.get(gone)
            raise AssertionError("a deleted thread was found")
        except NotFoundError:
            pass
    try:
        await alice.runs.get(busy["thread_id"], run["run_id"])
        raise AssertionError("a deleted thread's run was found")
    except NotFoundError:
        pass
    assert await alice.threads.count() == before - 2
    assert tid not in [f["thread_id"] for f in await alice.threads.search(limit=100)]
    # The copy is a thread of its own: it outlives the original.
    assert (await alice.threads.get(cid))["values"]["answer"] == "Twice."
    ok("threads.delete")


async def not_found(call):
    """Whether `call` is answered 404 (the SDK raises NotFoundError, or httpx's error for the
    routes it reads with httpx directly)."""
    try:
        await call
    except NotFoundError:
        return True
    except httpx.HTTPStatusError as e:
        return e.response.status_code == 404
    return False


async def threadless():
    """Runs without a thread (runs.wait, runs.stream and runs.create with thread_id None), on a
    thread made for the run and deleted after it unless on_completion="keep"; if_not_exists;
    runs.create_batch; runs.cancel_many."""
    alice = get_client(url=URL, api_key=ALICE)
    bob = get_client(url=URL, api_key=BOB)
    created = []
    out = await alice.runs.wait(None, "echoer", input=user_msg("shout"), on_run_created=created.append)
    assert out["answer"] == "Shouted: LOUD", out
    gone = created[0]["thread_id"]
    began = time.time()
    while not await not_found(alice.threads.get(gone)):
        assert time.time() - began < 30, "the threadless run's thread was never deleted"
        await asyncio.sleep(0.05)
    created = []
    out = await alice.runs.wait(None, "echoer", input=user_msg("shout"), on_completion="keep",
                                on_run_created=created.append)
    kept = await alice.threads.get(created[0]["thread_id"])
    assert kept["status"] == "idle" and kept["values"]["answer"] == "Shouted: LOUD", kept
    parts = await collect(alice.runs.stream(None, "echoer", input=user_msg("shout"), stream_mode="values"))
    assert parts[0][0] == "metadata" and parts[-1] == ("end", parts[-1][1]), parts
    assert parts[-2][1]["answer"] == "Shouted: LOUD", parts
    run = await alice.runs.create(None, "echoer", input=user_msg("shout"), on_completion="keep")
    assert run["thread_id"], run
    assert (await alice.runs.join(run["thread_id"], run["run_id"]))["answer"] == "Shouted: LOUD"
    ok("threadless runs")

    tid = str(uuid.uuid4())
    assert await not_found(alice.runs.wait(tid, "echoer", input=user_msg("shout")))
    out = await alice.runs.wait(tid, "echoer", input=user_msg("shout"), if_not_exists="create")
    assert out["answer"] == "Shouted: LOUD", out
    assert (await alice.threads.get(tid))["status"] == "idle"
    # Another user's thread is not made anew for bob, nor run.
    assert await not_found(bob.runs.wait(tid, "echoer", input=user_msg("shout"), if_not_exists="create"))
    ok("if_not_exists create")

    t = await alice.threads.create()
    runs = await alice.runs.create_batch([
        {"assistant_id": "echoer", "input": user_msg("a"), "thread_id": t["thread_id"]},
        {"assistant_id": "twice", "input": user_msg("b"), "on_completion": "keep"},
    ])
    assert len(runs) == 2 and runs[0]["thread_id"] == t["thread_id"], runs
    assert runs[1]["thread_id"] not in (None, t["thread_id"]), runs
    answers = [(await alice.runs.join(r["thread_id"], r["run_id"]))["answer"] for r in runs]
    assert answers == ["Shouted: LOUD", "Once."], answers
    ok("runs.create_batch")

    s = await alice.threads.create()
    first = await alice.runs.create(s["thread_id"], "hold", input=user_msg("wait forever"))
    queued = await alice.runs.create(s["thread_id"], "hold", input=user_msg("and again"),
                                     multitask_strategy="enqueue")
    assert queued["status"] == "pending", queued
    began = time.time()
    while (await alice.runs.get(s["thread_id"], first["run_id"]))["status"] != "running":
        assert time.time() - began < 30, "the first run never ran"
        await asyncio.sleep(0.05)
    assert await not_found(bob.runs.cancel_many(thread_id=s["thread_id"]))
    await alice.runs.cancel_many(thread_id=s["thread_id"])
    for r in [first, queued]:
        assert (await alice.runs.get(s["thread_id"], r["run_id"]))["status"] == "interrupted", r
    other = await alice.threads.create()
    third = await alice.runs.create(other["thread_id"], "hold", input=user_msg("wait forever"))
    began = time.time()
    while (await alice.runs.get(other["thread_id"], third["run_id"]))["status"] != "running":
        assert time.time() - began < 30, "the run never ran"
        await asyncio.sleep(0.05)
    await alice.runs.cancel_many(status="running")
    assert (await alice.runs.get(other["thread_id"], third["run_id"]))["status"] == "interrupted"
    last = await alice.threads.create()
    fourth = await alice.runs.create(last["thread_id"], "hold", input=user_msg("wait forever"))
    began = time.time()
    while (await alice.runs.get(last["thread_id"], fourth["run_id"]))["status"] != "running":
        assert time.time() - began < 30, "the run never ran"
        await asyncio.sleep(0.05)
    await alice.runs.cancel_many(thread_id=last["thread_id"], run_ids=[fourth["run_id"]])
    assert (await alice.runs.get(last["thread_id"], fourth["run_id"]))["status"] == "interrupted"
    try:
        await alice.runs.cancel_many(thread_id=s["thread_id"], action="rollback")
        raise AssertionError("a rollback was accepted")
    except httpx.HTTPStatusError as e:
        assert e.response.status_code == 422 and "rollback" in e.response.json()["detail"], e.response.text
    ok("runs.cancel_many")


async def store():
    """The store API on the user's long-term memory: put, get, search (by prefix, filter and
    words), namespaces, delete; another user sees none of it; what an agent remembered is listed
    under ["memories"]."""
    alice = get_client(url=URL, api_key=ALICE)
    bob = get_client(url=URL, api_key=BOB)
    await alice.store.put_item(["prefs", "ui"], "theme", {"color": "teal", "size": 3})
    await alice.store.put_item(["prefs", "ui"], "font", {"family": "serif"})
    await alice.store.put_item(["notes"], "n1", {"text": "the parcel arrived on tuesday"})
    got = await alice.store.get_item(["prefs", "ui"], key="theme")
    assert got["namespace"] == ["prefs", "ui"] and got["key"] == "theme", got
    assert got["value"] == {"color": "teal", "size": 3} and got["created_at"], got
    # A second put replaces the item.
    await alice.store.put_item(["prefs", "ui"], "theme", {"color": "plum"})
    assert (await alice.store.get_item(["prefs", "ui"], key="theme"))["value"] == {"color": "plum"}
    found = (await alice.store.search_items(["prefs"]))["items"]
    assert sorted(i["key"] for i in found) == ["font", "theme"], found
    found = (await alice.store.search_items(["prefs"], filter={"color": "plum"}))["items"]
    assert [i["key"] for i in found] == ["theme"], found
    found = (await alice.store.search_items([], query="parcel tuesday"))["items"]
    assert [i["key"] for i in found] == ["n1"] and found[0]["score"] is not None, found
    assert len((await alice.store.search_items([], limit=2))["items"]) == 2
    spaces = (await alice.store.list_namespaces())["namespaces"]
    assert spaces == [["notes"], ["prefs", "ui"]], spaces
    assert (await alice.store.list_namespaces(prefix=["prefs"]))["namespaces"] == [["prefs", "ui"]]
    assert (await alice.store.list_namespaces(max_depth=1))["namespaces"] == [["notes"], ["prefs"]]
    # Bob's store is his own.
    assert await not_found(bob.store.get_item(["prefs", "ui"], key="theme"))
    assert (await bob.store.search_items([]))["items"] == []
    assert (await bob.store.list_namespaces())["namespaces"] == []
    await bob.store.delete_item(["prefs", "ui"], key="theme")
    assert (await alice.store.get_item(["prefs", "ui"], key="theme"))["value"] == {"color": "plum"}
    await alice.store.delete_item(["prefs", "ui"], key="theme")
    assert await not_found(alice.store.get_item(["prefs", "ui"], key="theme"))
    try:
        await alice.store.put_item(["prefs"], "x", {"a": 1}, ttl=5)
        raise AssertionError("a ttl was accepted")
    except httpx.HTTPStatusError as e:
        assert e.response.status_code == 422 and "ttl" in e.response.json()["detail"], e.response.text
    ok("store items")

    # An item is a memory of the user's: her agent's `recall` finds it (the call's result is
    # the tool message of the run); bob's agent does not.
    t = await alice.threads.create()
    out = await alice.runs.wait(t["thread_id"], "recaller", input=user_msg("what about my parcel?"))
    results = [m["content"] for m in out["messages"] if m["type"] == "tool"]
    assert len(results) == 1 and "the parcel arrived on tuesday" in results[0], out
    t = await bob.threads.create()
    out = await bob.runs.wait(t["thread_id"], "recaller", input=user_msg("what about my parcel?"))
    results = [m["content"] for m in out["messages"] if m["type"] == "tool"]
    assert len(results) == 1 and "tuesday" not in results[0], out
    ok("store items are the user's memories")

    # What the `remember` agent remembered for alice is hers to read, and is recalled.
    t = await alice.threads.create()
    out = await alice.runs.wait(t["thread_id"], "rememberer", input=user_msg("remember my dog"))
    assert out.get("__error__") is None, out
    mems = (await alice.store.search_items(["memories"]))["items"]
    assert [i["value"]["text"] for i in mems] == ["Alice's dog is called Biscuit."], mems
    key = mems[0]["key"]
    assert (await alice.store.get_item(["memories"], key=key))["value"]["text"].startswith("Alice's dog")
    assert (await bob.store.search_items(["memories"]))["items"] == []
    await alice.store.delete_item(["memories"], key=key)
    assert (await alice.store.search_items(["memories"]))["items"] == []
    ok("store memories")


async def tasks_checkpoints():
    """The `tasks` and `checkpoints` stream modes in LangGraph's shapes: each task (the model's
    turns, the tool call) starts and ends with one id; a checkpoint follows each change of the
    values, and its id is one the thread's history lists and its state can be read at."""
    alice = get_client(url=URL, api_key=ALICE)
    t = await alice.threads.create()
    tid = t["thread_id"]
    modes = ["tasks", "checkpoints", "values"]
    whole = [p async for p in alice.runs.stream(tid, "echoer", input=user_msg("shout"),
                                                stream_mode=modes)]
    run_id = whole[0].data["run_id"]
    assert whole[-1].event == "end", whole[-1]
    body = [p for p in whole if p.event not in ("metadata", "end")]
    ids = [p.id for p in body]
    assert all(ids) and len(set(ids)) == len(ids), ids

    tasks = [p.data for p in body if p.event == "tasks"]
    starts = [d for d in tasks if "input" in d]
    ends = [d for d in tasks if "result" in d]
    assert all(set(d) == {"id", "name", "input", "triggers"} for d in starts), starts
    assert all(set(d) == {"id", "name", "error", "result", "interrupts"} for d in ends), ends
    assert [d["name"] for d in starts] == ["agent", "tools", "agent"], starts
    # Each task's start, then its end, with the same id; the next task starts after it ended.
    assert [(("start" if "input" in d else "end"), d["id"]) for d in tasks] == [
        (kind, d["id"]) for d in starts for kind in ("start", "end")], tasks
    assert [d["id"] for d in ends] == [d["id"] for d in starts] and len({d["id"] for d in ends}) == 3
    assert all(d["error"] is None and d["interrupts"] == [] for d in ends), ends
    call = ends[0]["result"]["messages"][0]["tool_calls"][0]
    assert call["name"] == "shout", ends[0]
    assert starts[1]["input"]["tool_call"] == {"name": "shout", "args": {}, "id": call["id"],
                                               "type": "tool_call"}, starts[1]
    assert starts[1]["triggers"] == ["__pregel_push"] and starts[0]["triggers"] == ["branch:to:agent"]
    assert starts[0]["input"]["messages"][-1]["content"] == "shout", starts[0]
    result = ends[1]["result"]["messages"][0]
    assert result["type"] == "tool" and result["tool_call_id"] == call["id"], ends[1]
    assert ends[2]["result"]["messages"][0]["content"] == "Shouted: LOUD", ends[2]

    cps = [p.data for p in body if p.event == "checkpoints"]
    values = [p.data for p in body if p.event == "values"]
    assert [c["values"] for c in cps] == values and len(cps) >= 4, (cps, values)
    assert all(set(c) == {"config", "parent_config", "values", "metadata", "next", "tasks"}
               for c in cps), cps[0]
    confs = [c["config"]["configurable"] for c in cps]
    assert all(c["thread_id"] == tid and c["checkpoint_ns"] == "" for c in confs), confs
    cids = [c["checkpoint_id"] for c in confs]
    assert len(set(cids)) == len(cids), cids
    assert cps[0]["parent_config"] is None, cps[0]
    assert [c["parent_config"]["configurable"]["checkpoint_id"] for c in cps[1:]] == cids[:-1]
    assert [c["metadata"]["step"] for c in cps] == list(range(-1, len(cps) - 1)), cps
    assert [c["metadata"]["source"] for c in cps] == ["input"] + ["loop"] * (len(cps) - 1)
    assert all(c["metadata"]["parents"] == {} for c in cps), cps
    # What runs next at each checkpoint is the task that starts after it, with its id.
    assert [c["next"] for c in cps] == [["agent"], ["tools"], ["agent"]] + [[]] * (len(cps) - 3)
    assert [c["tasks"][0]["id"] for c in cps[:3]] == [d["id"] for d in starts], (cps, starts)
    assert cps[1]["tasks"] == [{"id": starts[1]["id"], "name": "tools", "interrupts": [],
                                "state": None}], cps[1]

    # The thread's history lists the same checkpoints, and its state can be read at any of them.
    history = await alice.threads.get_history(tid, limit=100)
    assert [h["checkpoint"]["checkpoint_id"] for h in history] == cids[::-1], (history, cids)
    for h, c in zip(history[::-1], cps):
        assert h["values"] == c["values"] and h["next"] == c["next"], (h, c)
        assert [x["id"] for x in h["tasks"]] == [x["id"] for x in c["tasks"]], (h, c)
        parent = c["parent_config"] and c["parent_config"]["configurable"]["checkpoint_id"]
        assert (h["parent_checkpoint"] or {}).get("checkpoint_id") == parent, (h, c)
        assert {k: h["metadata"][k] for k in ("source", "step", "parents")} == c["metadata"], h
    state = await alice.threads.get_state(tid)
    assert state["checkpoint"]["checkpoint_id"] == cids[-1], (state["checkpoint"], cids)
    at = await alice.threads.get_state(tid, checkpoint_id=cids[1])
    assert at["checkpoint"]["checkpoint_id"] == cids[1] and at["values"] == cps[1]["values"], at
    assert at["next"] == ["tools"] and at["tasks"][0]["id"] == starts[1]["id"], at
    at = await alice.threads.get_state(tid, checkpoint={"checkpoint_id": cids[2]})
    assert at["values"] == cps[2]["values"] and at["next"] == ["agent"], at
    # A fork at a checkpoint seen in the stream holds the thread as it was there.
    async with httpx.AsyncClient(base_url=URL, headers={"x-api-key": ALICE}, timeout=30) as h:
        r = await h.post(f"/sessions/{tid}/fork", json={"at": int(cids[2])})
        assert r.status_code == 200, r.text
        fork = r.json()["id"]
    forked = (await alice.threads.get_state(fork))["values"]["messages"]
    assert [(m["type"], m["content"]) for m in forked][:3] == [
        (m["type"], m["content"]) for m in cps[2]["values"]["messages"]], (forked, cps[2])
    assert await not_found(alice.threads.get_state(tid, checkpoint_id="999999"))
    assert await not_found(get_client(url=URL, api_key=BOB).threads.get_state(tid, checkpoint_id=cids[1]))
    ok("tasks and checkpoints as LangGraph sends them")

    # A join after any part of the finished run sends exactly the parts that followed it.
    for i, p in enumerate(body):
        rest = [q async for q in alice.runs.join_stream(tid, run_id, stream_mode=modes,
                                                        last_event_id=p.id)]
        assert rest and rest[-1].event == "end", (p.id, rest)
        rest = [(q.id, q.event, q.data) for q in rest[:-1] if q.event]
        assert rest == [(q.id, q.event, q.data) for q in body[i + 1:]], (p.id, rest)
    # A live stream cut while a tool runs, joined again with its last id: nothing repeated or
    # lost (slowpoke's calls take a second each).
    t = await alice.threads.create()
    run = await alice.runs.create(t["thread_id"], "slowpoke", input=user_msg("three slow steps"))
    first = []
    async for q in alice.runs.join_stream(t["thread_id"], run["run_id"], stream_mode=modes):
        first.append(q)
        if q.event == "tasks" and q.data["name"] == "tools" and "input" in q.data:
            break
    last = [q.id for q in first if q.id][-1]
    rest = [q async for q in alice.runs.join_stream(t["thread_id"], run["run_id"],
                                                    stream_mode=modes, last_event_id=last)]
    assert rest[-1].event == "end", rest[-1]
    again = [q async for q in alice.runs.join_stream(t["thread_id"], run["run_id"],
                                                     stream_mode=modes)]
    got = [(q.id, q.event, q.data) for q in first + rest if q.id]
    want = [(q.id, q.event, q.data) for q in again if q.id]
    assert got == want, ([g[0] for g in got], [w[0] for w in want])
    assert sum(1 for _, e, d in want if e == "tasks" and "input" in d and d["name"] == "tools") == 3
    ok("a stream of tasks and checkpoints resumes after any of its parts, live or replayed")

    # A plan agent: its model's turns (the plan; the turn that goes on with an answer; the
    # review and answer) are `agent` tasks between its steps' attempts, each ended once.
    p = (await alice.threads.create())["thread_id"]

    async def plan_tasks(**kw):
        parts = [x async for x in alice.runs.stream(p, "ask", stream_mode=["tasks", "checkpoints"], **kw)]
        tasks = [x.data for x in parts if x.event == "tasks"]
        cps = [x.data for x in parts if x.event == "checkpoints"]
        starts = [d for d in tasks if "input" in d]
        ends = {d["id"]: d for d in tasks if "result" in d}
        assert sorted(ends) == sorted(d["id"] for d in starts), tasks
        # One task at a time: each ends before the next starts.
        order = [("start" if "input" in d else "end", d["id"]) for d in tasks]
        assert order == [(k, d["id"]) for d in starts for k in ("start", "end")], order
        return starts, ends, cps

    starts, ends, cps = await plan_tasks(input=user_msg("refund c1"))
    assert cps[0]["next"] == ["agent"] and cps[0]["tasks"][0]["id"] == starts[0]["id"], cps[0]
    assert [d["name"] for d in starts] == ["agent", "refund"], starts
    planned = ends[starts[0]["id"]]
    assert planned["error"] is None and planned["result"]["plan"][0]["_id"] == "refund", planned
    assert ends[starts[1]["id"]]["interrupts"], ends
    starts, ends, _ = await plan_tasks(command={"resume": "50"})
    assert [d["name"] for d in starts] == ["agent", "refund", "agent"], starts
    assert all(e["error"] is None and e["interrupts"] == [] for e in ends.values()), ends
    ok("a plan agent's model turns are agent tasks between its steps")


async def update_state():
    """threads.update_state adds messages to a thread's conversation between runs: they are in
    its values and its history (a checkpoint with source `update`), and the next run's model
    request carries them; what cannot be added is refused with what to do."""
    alice = get_client(url=URL, api_key=ALICE)
    bob = get_client(url=URL, api_key=BOB)

    async def refused(status, call, *words):
        try:
            await call
        except httpx.HTTPStatusError as e:
            assert e.response.status_code == status, (status, e.response.status_code, e.response.text)
            detail = e.response.json()["detail"]
            for w in words:
                assert w in detail, (w, detail)
            return detail
        raise AssertionError(f"accepted, expected {status}")

    t = await alice.threads.create()
    tid = t["thread_id"]
    await refused(409, alice.threads.update_state(tid, {"messages": [{"type": "human", "content": "hi"}]}),
                  "has not run yet", "runs.create")
    await alice.runs.wait(tid, "twice", input=user_msg("one"))
    before = await alice.threads.get_state(tid)
    assert [m["type"] for m in before["values"]["messages"]] == ["human", "ai", "tool", "ai"], before

    added = [
        {"type": "human", "content": "My name is Ada."},
        {"type": "ai", "content": "", "tool_calls": [{"name": "nap", "args": {"minutes": 5}, "id": "edited-1", "type": "tool_call"}]},
        {"type": "tool", "content": "{\"slept\": 5}", "tool_call_id": "edited-1"},
        {"type": "ai", "content": "Hello Ada, I napped."},
    ]
    out = await alice.threads.update_state(tid, {"messages": added}, as_node="agent")
    cp = out["checkpoint"]
    assert cp["thread_id"] == tid and cp["checkpoint_id"] != before["checkpoint"]["checkpoint_id"], out
    after = await alice.threads.get_state(tid)
    msgs = after["values"]["messages"]
    assert [m["type"] for m in msgs] == ["human", "ai", "tool", "ai", "human", "ai", "tool", "ai"], msgs
    assert msgs[4]["content"] == "My name is Ada." and msgs[7]["content"] == "Hello Ada, I napped.", msgs
    assert msgs[5]["tool_calls"][0]["id"] == "edited-1" and msgs[5]["tool_calls"][0]["args"] == {"minutes": 5}, msgs
    assert msgs[6]["tool_call_id"] == "edited-1" and msgs[6]["name"] == "nap", msgs
    assert after["checkpoint"]["checkpoint_id"] == cp["checkpoint_id"], (after, cp)
    assert (await alice.threads.get(tid))["status"] == "idle"
    history = await alice.threads.get_history(tid)
    assert history[0]["checkpoint"]["checkpoint_id"] == cp["checkpoint_id"], history[0]
    assert history[0]["metadata"]["source"] == "update", history[0]["metadata"]
    assert history[1]["checkpoint"]["checkpoint_id"] == before["checkpoint"]["checkpoint_id"], history[1]

    # The next run's first model request carries the added messages, in order, before its task.
    await alice.runs.wait(tid, "twice", input=user_msg("two"))
    call = (await alice.http.get(f"/sessions/{tid}/model-calls/3"))
    sent = [(m["role"], m.get("content", "")) for m in call["request"]["messages"]]
    said = [c for _, c in sent]
    assert "My name is Ada." in said and "Hello Ada, I napped." in said and "two" in said, sent
    assert said.index("My name is Ada.") < said.index("Hello Ada, I napped.") < said.index("two"), sent
    assert ("tool", "{\"slept\": 5}") in sent, sent
    final = await alice.threads.get_state(tid)
    assert final["values"]["messages"][-1]["content"] == "Twice.", final
    ok("threads.update_state adds messages the next run's model reads")

    # What cannot be added, each refused with what to do instead.
    last = final["values"]["messages"][-1]["id"]
    await refused(409, alice.threads.update_state(tid, {"messages": [{"type": "ai", "content": "x", "id": last}]}),
                  f"values.messages[0].id `{last}`", "fork")
    await refused(422, alice.threads.update_state(tid, {"messages": [{"type": "tool", "content": "x", "tool_call_id": "nope"}]}),
                  "values.messages[0].tool_call_id `nope`")
    await refused(422, alice.threads.update_state(tid, {"data": {"k": 1}}), "values.data")
    await refused(422, alice.threads.update_state(tid, {"messages": [{"type": "system", "content": "x"}]}),
                  "values.messages[0]", "instructions")
    await refused(422, alice.threads.update_state(tid, {"messages": []}), "values.messages is empty")
    await refused(409, alice.threads.update_state(tid, {"messages": [{"type": "human", "content": "late"}]},
                                                  checkpoint_id=cp["checkpoint_id"]),
                  f"checkpoint {cp['checkpoint_id']} is not thread {tid}'s latest", "fork")
    try:
        await bob.threads.update_state(tid, {"messages": [{"type": "human", "content": "intruder"}]})
        raise AssertionError("another user updated alice's thread")
    except NotFoundError:
        pass
    assert len((await alice.threads.get_state(tid))["values"]["messages"]) == len(final["values"]["messages"])

    # A thread a run drives is refused while the run goes on.
    h = await alice.threads.create()
    run = await alice.runs.create(h["thread_id"], "hold", input=user_msg("hang on"))
    for _ in range(100):
        if os.path.exists(os.path.join(WORK, "hold.started")):
            break
        await asyncio.sleep(0.1)
    await refused(409, alice.threads.update_state(h["thread_id"], {"messages": [{"type": "human", "content": "x"}]}),
                  "is running", "runs.cancel")
    await alice.runs.cancel(h["thread_id"], run["run_id"], wait=True)
    ok("threads.update_state refuses what it cannot add, with what to do")

    # Raced against a run starting on the same thread, 20 times with the two requests shifted
    # by 0-4 ms: the run is always accepted (it waits for an update being written) and ends as
    # it should; the update is accepted or refused with 409 (the thread is running); the
    # thread's conversation holds the note once if the update was accepted (before the run's
    # task or after its answer, never inside the run) and not at all if refused.
    outcomes = {}

    async def race(i):
        t = await alice.threads.create()
        tid = t["thread_id"]
        await alice.runs.wait(tid, "twice", input=user_msg("one"))
        note = f"note {i}"

        async def start():
            await asyncio.sleep((i % 3) * 0.002)
            return await alice.runs.create(tid, "twice", input=user_msg("two"))

        async def update():
            await asyncio.sleep(((i + 1) % 3) * 0.002)
            try:
                await alice.threads.update_state(tid, {"messages": [{"type": "human", "content": note}]})
                return True
            except httpx.HTTPStatusError as e:
                assert e.response.status_code == 409, e.response.text
                return False

        run, updated = await asyncio.gather(start(), update())
        await alice.runs.join(tid, run["run_id"])
        done = await alice.runs.get(tid, run["run_id"])
        assert done["status"] == "success", done
        state = await alice.threads.get_state(tid)
        msgs = state["values"]["messages"]
        said = [m.get("content") for m in msgs]
        assert said.count(note) == (1 if updated else 0), (i, run, updated, said)
        if updated:
            k, two = said.index(note), said.index("two")
            assert k < two or said[k - 1] == "Twice.", (i, said)
        # Every tool call is followed by its result before anything else.
        for j, m in enumerate(msgs):
            for c in m.get("tool_calls") or []:
                assert msgs[j + 1]["type"] == "tool" and msgs[j + 1]["tool_call_id"] == c["id"], (i, msgs)
        assert (await alice.threads.get(tid))["status"] == "idle"
        key = "note before the run" if updated and k < two else "note after the run" if updated else "update refused"
        outcomes[key] = outcomes.get(key, 0) + 1

    for i in range(20):
        await race(i)
    print("update_state raced against a run start:", json.dumps(outcomes, sort_keys=True), flush=True)
    ok("threads.update_state raced against a run start: the run waits for the update or the update is refused, nothing is lost or split")


async def queued_restart():
    """A run queued behind another survives its server's SIGKILL: the next server answers for it
    and starts it after the run before it."""
    alice = get_client(url=URL, api_key=ALICE)
    t = await alice.threads.create()
    tid = t["thread_id"]
    first = await alice.runs.create(tid, "lineup", input=user_msg("first"))
    while not os.path.exists(os.path.join(WORK, "lineup.started")):
        await asyncio.sleep(0.05)
    second = await alice.runs.create(tid, "lineup", input=user_msg("second"),
                                     multitask_strategy="enqueue")
    got = await alice.runs.get(tid, second["run_id"])
    assert got["status"] == "pending", got
    open(os.path.join(WORK, "restart.now"), "w").close()
    while not os.path.exists(os.path.join(WORK, "restarted")):
        await asyncio.sleep(0.05)
    for _ in range(200):
        try:
            got = await alice.runs.get(tid, second["run_id"])
            break
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
            await asyncio.sleep(0.05)
    assert got["run_id"] == second["run_id"] and got["status"] in ("pending", "running", "success"), got
    out = await alice.runs.join(tid, second["run_id"])
    assert out["answer"] == "Second.", out
    runs = await alice.runs.list(tid)
    assert [r["run_id"] for r in runs] == [second["run_id"], first["run_id"]], runs
    assert [r["status"] for r in runs] == ["success", "success"], runs
    msgs = (await alice.threads.get_state(tid))["values"]["messages"]
    assert [m["content"] for m in msgs if m["type"] == "human"] == ["first", "second"], msgs
    assert [m["content"] for m in msgs if m["type"] == "ai" and m["content"]] == ["First.", "Second."], msgs
    ok("a queued run survives its server's SIGKILL")


SCENARIOS = {"restart": restart, "resume": resume, "wait-restart": wait_restart,
             "body-limit": body_limit, "tools": tools, "threads": threads_api,
             "threadless": threadless, "store": store, "update-state": update_state,
             "tasks-checkpoints": tasks_checkpoints, "queued-restart": queued_restart}
asyncio.run(SCENARIOS[MODE]() if MODE in SCENARIOS else main())
