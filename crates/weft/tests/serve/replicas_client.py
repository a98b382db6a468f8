"""Two `weft serve` replicas on one store, driven with the official langgraph-sdk client: what
one replica starts, the other shows, streams, joins, queues behind and cancels.

Usage: replicas_client.py URL_A URL_B KEY

Prints `ok: CHECK` for each check that held; the first failed assertion ends the script.
"""
import asyncio
import sys
import time

from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError

URL_A, URL_B, KEY = sys.argv[1:4]
MSG = {"messages": [{"role": "user", "content": "go"}]}


async def within(what, seconds, aw):
    try:
        return await asyncio.wait_for(aw, seconds)
    except asyncio.TimeoutError:
        raise AssertionError(f"{what}: not done within {seconds} s")


async def until(what, seconds, check):
    since = time.time()
    while not await check():
        assert time.time() - since < seconds, f"{what}: not so within {seconds} s"
        await asyncio.sleep(0.1)


async def collect(stream):
    parts = []
    async for p in stream:
        parts.append((p.event, p.data, p.id, time.time()))
    return parts


def seqs_of(parts):
    return [d["seq"] for e, d, _, _ in parts if e == "custom"]


async def status(client, tid, rid):
    return (await client.runs.get(tid, rid))["status"]


async def across(a, b):
    """A run started on A: B sees it, streams it (whole and from a Last-Event-ID), joins it."""
    t = (await a.threads.create())["thread_id"]
    run = await a.runs.create(t, "slowpoke", input=MSG)
    rid = run["run_id"]
    assert await status(b, t, rid) in ("pending", "running"), await b.runs.get(t, rid)
    assert (await b.threads.get(t))["status"] == "busy"
    listed = await b.runs.list(t)
    assert [r["run_id"] for r in listed] == [rid] and listed[0]["status"] == "running", listed
    print("ok: a run of A seen from B while A drives it", flush=True)

    joined = time.time()
    whole = await within("B's stream of A's run", 60,
                         collect(b.runs.join_stream(t, rid, stream_mode="custom")))
    events = [e for e, _, _, _ in whole]
    assert events[-1] == "end" and "error" not in events, events
    seqs = seqs_of(whole)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    kinds = [d["type"] for e, d, _, _ in whole if e == "custom"]
    assert kinds[-1] == "run_finished" and kinds.count("tool_call_finished") == 3, kinds
    # `end` follows the run's last event at once (A lets the thread go right after it).
    stored = [d["ts"] for e, d, _, _ in whole if e == "custom"][-1] / 1000
    lag = whole[-1][3] - stored
    assert lag < 3, f"`end` came {lag:.1f} s after the run's last event"
    # From B again, after a Last-Event-ID in the middle: exactly the rest.
    ids = [i for e, _, i, _ in whole if e == "custom"]
    k = len(ids) // 2
    rest = await within("B's stream after a Last-Event-ID", 30,
                        collect(b.runs.join_stream(t, rid, stream_mode="custom",
                                                   last_event_id=ids[k])))
    assert seqs_of(rest) == seqs[k + 1:], (seqs_of(rest), seqs)
    # Live from B: each event A stored after B's stream began reached the client in a
    # moment (B reads the log every 250 ms; 2 s leaves room for a loaded machine).
    delays = [at - d["ts"] / 1000 for e, d, _, at in whole if e == "custom" and d["ts"] / 1000 > joined]
    assert delays and max(delays) < 2, delays
    print(f"ok: B streams A's run to its end (end {lag:.2f} s after its last event; "
          f"{len(delays)} live events, at most {max(delays):.2f} s after A stored them)", flush=True)

    values = await within("B's join of A's run", 30, b.runs.join(t, rid))
    assert values["answer"] == "All three done.", values
    assert await status(b, t, rid) == "success", await b.runs.get(t, rid)
    listed = await b.runs.list(t)
    assert listed[0]["status"] == "success", listed
    assert (await b.threads.get(t))["status"] == "idle"
    print("ok: B joins A's run and sees it ended", flush=True)
    return t


async def multitask(a, b):
    """A second run sent to B while A drives the thread: rejected, or queued behind A's run."""
    t = (await a.threads.create())["thread_id"]
    first = await a.runs.create(t, "relay", input=MSG)
    try:
        await b.runs.create(t, "relay", input=MSG, multitask_strategy="reject")
        raise AssertionError("B accepted a second run on a thread A drives (reject)")
    except ConflictError:
        pass
    # B looks at A's run while it runs, and again (below) once it ended.
    assert await status(b, t, first["run_id"]) in ("pending", "running")
    second = await b.runs.create(t, "relay", input=MSG, multitask_strategy="enqueue")
    assert second["status"] == "pending", second
    # Stored: A sees the run B queued, before it begins.
    assert await status(a, t, second["run_id"]) in ("pending", "running", "success")
    values = await within("the run queued on B", 60, b.runs.join(t, second["run_id"]))
    assert values["answer"] == "Twice.", values
    assert await status(a, t, first["run_id"]) == "success"
    assert await status(b, t, first["run_id"]) == "success", await b.runs.get(t, first["run_id"])
    assert await status(b, t, second["run_id"]) == "success"
    # Both are in the thread's log, the queued one after the first.
    order = [r["run_id"] for r in await a.runs.list(t)]
    assert order == [second["run_id"], first["run_id"]], order
    print("ok: multitask reject and enqueue across replicas", flush=True)


async def cancels(a, b):
    """Runs A drives, cancelled from B: one by one, and with cancel_many by thread and status."""
    async def stuck():
        t = (await a.threads.create())["thread_id"]
        r = await a.runs.create(t, "hold", input=MSG)
        await until("the run's start", 20, lambda: _started(a, t))
        return t, r["run_id"]

    t, rid = await stuck()
    since = time.time()
    await within("runs.cancel from B", 40, b.runs.cancel(t, rid, wait=True))
    took = time.time() - since
    assert await status(a, t, rid) == "interrupted", await a.runs.get(t, rid)
    assert (await b.threads.get(t))["status"] == "idle"
    assert took < 10, f"runs.cancel from B took {took:.1f} s"
    print(f"ok: runs.cancel from B of A's run ({took:.2f} s)", flush=True)

    t, rid = await stuck()
    await within("cancel_many by thread from B", 40, b.runs.cancel_many(thread_id=t))
    assert await status(b, t, rid) == "interrupted", await b.runs.get(t, rid)
    t2, rid2 = await stuck()
    await within("cancel_many by run ids from B", 40,
                 b.runs.cancel_many(thread_id=t2, run_ids=[rid2]))
    assert await status(b, t2, rid2) == "interrupted", await b.runs.get(t2, rid2)
    t3, rid3 = await stuck()
    await within("cancel_many by status from B", 40, b.runs.cancel_many(status="running"))
    assert await status(a, t3, rid3) == "interrupted", await a.runs.get(t3, rid3)
    print("ok: runs.cancel_many from B reaches A's runs", flush=True)

    # A run queued on A, cancelled from B before it began: A never starts it.
    t4, rid4 = await stuck()
    queued = await a.runs.create(t4, "hold", input=MSG, multitask_strategy="enqueue")
    assert await status(b, t4, queued["run_id"]) == "pending", await b.runs.get(t4, queued["run_id"])
    await within("runs.cancel from B of A's queued run", 40,
                 b.runs.cancel(t4, queued["run_id"], wait=True))
    assert await status(b, t4, queued["run_id"]) == "interrupted"
    await within("runs.cancel from B", 40, b.runs.cancel(t4, rid4, wait=True))
    await never_began(a, t4, queued["run_id"], "the run cancelled on B")
    assert (await a.threads.get(t4))["status"] == "idle"
    print("ok: a run queued on A, cancelled from B, never begins", flush=True)

    # cancel_many(status="pending") on B reaches a run queued on A (stored, not in B's memory).
    t5, rid5 = await stuck()
    queued = await a.runs.create(t5, "hold", input=MSG, multitask_strategy="enqueue")
    await within("cancel_many by status pending from B", 40, b.runs.cancel_many(status="pending"))
    assert await status(b, t5, queued["run_id"]) == "interrupted", await b.runs.get(t5, queued["run_id"])
    await within("runs.cancel from B", 40, b.runs.cancel(t5, rid5, wait=True))
    await never_began(a, t5, queued["run_id"], "the run cancelled by status on B")
    print("ok: cancel_many by status on B reaches a run queued on A", flush=True)


async def never_began(a, tid, rid, what):
    """A gives up queued run `rid` (it ends `interrupted`) and no run of the thread went on."""
    async def given_up():
        return await status(a, tid, rid) == "interrupted"
    await until(f"A giving up {what}", 20, given_up)
    listed = await a.runs.list(tid)
    assert [r["run_id"] for r in listed if r["status"] != "interrupted"] == [], listed


async def _started(client, tid):
    """Whether the thread's run has a call in flight (its log has a start without an end)."""
    state = await client.threads.get_state(tid)
    msgs = state["values"].get("messages", [])
    return any(m.get("type") == "ai" and m.get("tool_calls") for m in msgs)


async def main():
    a, b = get_client(url=URL_A, api_key=KEY), get_client(url=URL_B, api_key=KEY)
    await across(a, b)
    await multitask(a, b)
    await cancels(a, b)


if __name__ == "__main__":
    asyncio.run(main())
