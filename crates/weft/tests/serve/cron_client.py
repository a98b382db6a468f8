"""Crons through `weft serve`, driven with the official langgraph-sdk client (`client.crons`).

Usage: cron_client.py URL KEY OTHER_KEY WORKDIR MODE [ARGS...]

Modes:
- `api`: create (threadless and on a thread), search (filters, limit, offset, sort, select),
  count, update (schedule, enabled, end_time set and cleared), delete; a second user's key sees
  and touches none of the first user's crons; a bad schedule, timezone or end_time is a 422
  naming the field. Prints `ok: CHECK` per check.
- `fire`: a cron on a thread every second, a threadless cron (`keep`) every 2 seconds and a
  cron on a second thread every second that ends after 2.5 s, for
  SECONDS (ARGS[0]); then they are stopped and the runs they started are counted through
  `runs.list` and `threads.search`: every run succeeded, the tool ran once per run (WORKDIR/
  ticks.log), each cron's tick count is the number of its runs, and the ending cron took no
  tick after its end_time.
- `deleting`: a threadless cron every second with `on_run_completed` left out (`delete`): its
  runs ran (the tool's log names their threads) and their threads are gone once they ended.
- `thread-cron`: makes a thread and a cron on it every second; prints `thread: ID` and
  `cron: ID`.
- `threadless-cron`: a threadless cron (`keep`) every second; prints `cron: ID`.
- `check-thread THREAD CRON AFTER_MS`: deletes the cron, waits for the thread's runs to end and
  checks them: every run succeeded, runs began after AFTER_MS (a restart), the ticks missed
  before it ran once, not each, and the tool ran once per run. Prints `counts: ...`.
- `check-threadless CRON`: disables the cron, waits for its runs, and checks that each tick ran
  exactly once: one thread per tick, the tool once per thread, and a tick for every second the
  cron was enabled (the last perhaps not yet taken). Prints `counts: ...`.
- `far-cron`: makes a thread and a cron on it whose next tick is far off; prints `thread: ID`
  and `cron: ID`.
- `open-claim DB CRON TICK_MS`: writes into the SQLite file DB what a server that died between
  claiming tick TICK_MS of the cron and storing its run leaves: the claim, open and expired.
- `taken-up THREAD CRON TICK_MS TICKS`: waits until the cron has taken TICKS ticks, the last
  one TICK_MS, then checks that the thread has exactly one run, the tick's, which succeeded,
  and that the tool ran once.
- `many CLIENTS SECONDS [URL2]`: CLIENTS clients at once (each its own connection; with URL2,
  every other one talks to that server) create, update and delete crons on the `ticker`
  assistant: each makes a threadless cron every 2 seconds (`keep`) that it updates again and
  again while it ticks, a threadless cron every second that it deletes after a moment, and a cron
  on one thread they all share that it changes and deletes. Then (after SECONDS) it disables the
  crons it kept and checks: every create returned a distinct id; no run of a deleted cron was
  stored after its delete answered (the first event of each run's thread, in milliseconds); each
  tick ran once: one thread and one tool call per tick, as many runs as ticks counted on the cron,
  all succeeded. Prints `counts: ...`.
The first failed assertion ends the script (exit 1).
"""
import asyncio
import json
import os
import sys
import time
from datetime import datetime, timedelta, timezone

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

URL, KEY, OTHER, WORK, MODE = sys.argv[1:6]
ARGS = sys.argv[6:]
MSG = {"messages": [{"role": "user", "content": "tick"}]}


def ok(name):
    print(f"ok: {name}", flush=True)


def tool_lines():
    try:
        with open(os.path.join(WORK, "ticks.log")) as f:
            return [l.split()[1] for l in f if l.startswith("tick ")]
    except FileNotFoundError:
        return []


async def status_of(call):
    """The HTTP status and detail of a call that must fail."""
    try:
        await call
    except httpx.HTTPStatusError as e:
        return e.response.status_code, e.response.text
    raise AssertionError("the call succeeded")


async def api(a, b):
    t = await a.threads.create()
    tid = t["thread_id"]
    on_thread = await a.crons.create_for_thread(
        tid, "ticker", schedule="0 9 * * *", input=MSG, metadata={"team": "red"}
    )
    assert on_thread["thread_id"] == tid and on_thread["schedule"] == "0 9 * * *", on_thread
    assert on_thread["enabled"] is True and on_thread["user_id"] == "alice", on_thread
    assert on_thread["next_run_date"].endswith("09:00:00.000Z") or "09:00:00" in on_thread["next_run_date"], on_thread
    assert on_thread["payload"]["input"] == MSG, on_thread
    threadless = await a.crons.create(
        "ticker", schedule="30 6 * * 1", input=MSG, metadata={"team": "blue"},
        on_run_completed="keep",
    )
    assert threadless["thread_id"] is None and threadless["on_run_completed"] == "keep", threadless
    third = await a.crons.create("ticker", schedule="*/10 * * * * *", input=MSG, enabled=False)
    assert third["enabled"] is False and third["next_run_date"] is None, third
    ok("create")

    found = await a.crons.search()
    assert len(found) == 3, found
    # Newest first by default; ascending on request.
    assert [c["cron_id"] for c in found] == [third["cron_id"], threadless["cron_id"], on_thread["cron_id"]], found
    asc = await a.crons.search(sort_by="created_at", sort_order="asc")
    assert [c["cron_id"] for c in asc] == [on_thread["cron_id"], threadless["cron_id"], third["cron_id"]], asc
    assert [c["cron_id"] for c in await a.crons.search(thread_id=tid)] == [on_thread["cron_id"]]
    assert [c["cron_id"] for c in await a.crons.search(metadata={"team": "blue"})] == [threadless["cron_id"]]
    assert [c["cron_id"] for c in await a.crons.search(enabled=False)] == [third["cron_id"]]
    assert len(await a.crons.search(assistant_id="ticker")) == 3
    assert await a.crons.search(assistant_id="echoer") == []
    page = await a.crons.search(limit=1, offset=1)
    assert [c["cron_id"] for c in page] == [threadless["cron_id"]], page
    picked = await a.crons.search(limit=1, select=["cron_id", "schedule"])
    assert picked == [{"cron_id": third["cron_id"], "schedule": "*/10 * * * * *"}], picked
    status, detail = await status_of(a.crons.search(select=["nope"]))
    assert status == 422 and "select" in detail, (status, detail)
    ok("search")

    assert await a.crons.count() == 3
    assert await a.crons.count(thread_id=tid) == 1
    assert await a.crons.count(metadata={"team": "red"}) == 1
    ok("count")

    before = on_thread["next_run_date"]
    moved = await a.crons.update(on_thread["cron_id"], schedule="15 10 * * *")
    assert moved["schedule"] == "15 10 * * *" and moved["next_run_date"] != before, moved
    assert "10:15:00" in moved["next_run_date"], moved
    end = datetime.now(timezone.utc) + timedelta(days=400)
    ended = await a.crons.update(on_thread["cron_id"], end_time=end, enabled=False)
    assert ended["enabled"] is False and ended["end_time"] is not None, ended
    assert ended["end_time"].startswith(end.strftime("%Y-%m-%dT%H:%M")), ended
    cleared = await a.crons.update(on_thread["cron_id"], end_time=None, enabled=True)
    assert cleared["end_time"] is None and cleared["enabled"] is True, cleared
    # An end time before the next tick leaves no tick.
    soon = datetime.now(timezone.utc) + timedelta(seconds=1)
    over = await a.crons.update(threadless["cron_id"], end_time=soon)
    assert over["next_run_date"] is None, over
    assert [c["schedule"] for c in await a.crons.search(thread_id=tid)] == ["15 10 * * *"]
    ok("update")

    # Another user's key sees none of them and touches none.
    assert await b.crons.search() == [] and await b.crons.count() == 0
    for call in (
        b.crons.delete(on_thread["cron_id"]),
        b.crons.update(on_thread["cron_id"], schedule="* * * * *"),
        b.crons.create_for_thread(tid, "ticker", schedule="* * * * *", input=MSG),
    ):
        status, _ = await status_of(call)
        assert status == 404, status
    assert await a.crons.count() == 3
    mine = await b.crons.create("ticker", schedule="0 0 1 1 *", input=MSG)
    assert await b.crons.count() == 1 and await a.crons.count() == 3
    assert mine["user_id"] == "bob", mine
    ok("isolation")

    for schedule, words in [
        ("61 * * * *", "schedule `61 * * * *`"),
        ("* * *", "has 3 fields"),
        ("every day", "schedule `every day`"),
    ]:
        status, detail = await status_of(a.crons.create("ticker", schedule=schedule, input=MSG))
        assert status == 422 and words in detail, (schedule, status, detail)
    status, detail = await status_of(a.crons.update(on_thread["cron_id"], schedule="* * * 13 *"))
    assert status == 422 and "schedule" in detail, (status, detail)
    status, detail = await status_of(
        a.crons.create("ticker", schedule="0 9 * * *", input=MSG, timezone="Europe/Paris"))
    assert status == 422 and "timezone" in detail, (status, detail)
    status, detail = await status_of(a.crons.create("ticker", schedule="0 9 * * *"))
    assert status == 422 and "input" in detail, (status, detail)
    status, detail = await status_of(a.crons.create("nobody", schedule="0 9 * * *", input=MSG))
    assert status == 404 and "assistant" in detail, (status, detail)
    assert await a.crons.count() == 3
    ok("bad schedule")

    await a.crons.delete(third["cron_id"])
    assert await a.crons.count() == 2
    status, _ = await status_of(a.crons.delete(third["cron_id"]))
    assert status == 404
    # A thread's crons go with it.
    await a.threads.delete(tid)
    assert await a.crons.count() == 1 and await a.crons.count(thread_id=tid) == 0
    ok("delete")

    info = await a.http.get("/info")
    assert info["flags"]["crons"] is True, info
    ok("info")


async def wait_idle(a, tid, timeout=60):
    since = time.time()
    while True:
        runs = await a.runs.list(tid, limit=1000)
        if all(r["status"] not in ("pending", "running") for r in runs):
            return runs
        assert time.time() - since < timeout, f"runs still going: {runs}"
        await asyncio.sleep(0.2)


async def fire(a, seconds):
    t = await a.threads.create()
    tid = t["thread_id"]
    on_thread = await a.crons.create_for_thread(tid, "ticker", schedule="* * * * * *", input=MSG)
    threadless = await a.crons.create(
        "ticker", schedule="*/2 * * * * *", input=MSG, on_run_completed="keep")
    # A cron that ends 2.5 s from now: at most 3 ticks, then none.
    t2 = (await a.threads.create())["thread_id"]
    end = datetime.now(timezone.utc) + timedelta(seconds=2.5)
    ending = await a.crons.create_for_thread(
        t2, "ticker", schedule="* * * * * *", input=MSG, end_time=end)
    began = time.time()
    await asyncio.sleep(seconds)
    await a.crons.update(on_thread["cron_id"], enabled=False)
    await asyncio.sleep(0.5)  # a tick claimed just before is recorded
    [mine] = await a.crons.search(thread_id=tid)
    await a.crons.delete(on_thread["cron_id"])
    # The threadless cron's count is read from it before it goes.
    await a.crons.update(threadless["cron_id"], enabled=False)
    took = time.time() - began
    await asyncio.sleep(0.5)
    runs = await wait_idle(a, tid)
    assert all(r["status"] == "success" for r in runs), runs
    [ended] = await a.crons.search(thread_id=t2)
    ended_runs = await wait_idle(a, t2)
    assert ended["next_run_date"] is None and 2 <= ended["ticks"] <= 3, ended
    assert 1 <= len(ended_runs) <= ended["ticks"], (ended_runs, ended)
    assert all(datetime.fromisoformat(r["created_at"].replace("Z", "+00:00")) <= end for r in ended_runs)
    await a.crons.delete(ending["cron_id"])
    others = [x for x in await a.threads.search(limit=1000) if x["thread_id"] not in (tid, t2)]
    for x in others:
        await wait_idle(a, x["thread_id"])
    per_thread = [await a.runs.list(x["thread_id"]) for x in others]
    assert all(len(rs) == 1 for rs in per_thread), f"one run per thread: {per_thread}"
    stateless = [r for rs in per_thread for r in rs]
    assert all(r["status"] == "success" for r in stateless), stateless
    [cron] = await a.crons.search(metadata={})
    tools = tool_lines()
    print(f"counts: seconds={took:.1f} thread_ticks={mine['ticks']} thread_runs={len(runs)} "
          f"threadless_runs={len(stateless)} threadless_ticks={cron['ticks']} "
          f"ending_ticks={ended['ticks']} "
          f"tool_calls={len(tools)}", flush=True)
    # A tick every second; each started a run, but for a tick that found the thread still busy
    # with the run before (refused, as multitask_strategy `reject` says, and recorded).
    assert seconds - 1 <= mine["ticks"] <= seconds + 1, (mine, seconds)
    assert mine["ticks"] // 2 <= len(runs) <= mine["ticks"], (len(runs), mine)
    assert mine["last_tick"]["run_id"] in [r["run_id"] for r in runs] or "busy" in (mine["last_tick"]["error"] or ""), mine
    assert seconds // 2 - 1 <= len(stateless) <= seconds // 2 + 1, (len(stateless), seconds)
    assert cron["ticks"] == len(stateless) and cron["last_tick"]["error"] is None, cron
    assert cron["last_tick"]["thread_id"] in {x["thread_id"] for x in others}, cron
    # The tool ran once per run: once on the thread per tick, once on each threadless thread.
    assert len(tools) == len(runs) + len(stateless) + len(ended_runs), (len(tools), len(runs), len(stateless))
    assert sorted(set(tools)) == sorted({tid, t2} | {x["thread_id"] for x in others}), tools
    assert tools.count(tid) == len(runs), (tools.count(tid), len(runs))
    ok("fire")


async def deleting(a):
    before = set(tool_lines())
    kept = {x["thread_id"] for x in await a.threads.search(limit=1000)}
    c = await a.crons.create("ticker", schedule="* * * * * *", input=MSG)
    assert c["on_run_completed"] is None, c
    await asyncio.sleep(3)
    await a.crons.update(c["cron_id"], enabled=False)
    await asyncio.sleep(0.5)
    [c] = [x for x in await a.crons.search(limit=100) if x["cron_id"] == c["cron_id"]]
    ran = set(tool_lines()) - before
    since = time.time()
    while True:
        now = {x["thread_id"] for x in await a.threads.search(limit=1000)}
        if not (now - kept):
            break
        assert time.time() - since < 30, f"threads of deleting runs kept: {now - kept}"
        await asyncio.sleep(0.2)
    print(f"counts: ticks={c['ticks']} runs_that_ran={len(ran)} threads_left={len(now - kept)}", flush=True)
    assert 2 <= len(ran) == c["ticks"], (ran, c)
    assert c["last_tick"]["thread_id"] in ran, c
    try:
        await a.threads.get(c["last_tick"]["thread_id"])
        raise AssertionError("the last tick's thread is still there")
    except NotFoundError:
        pass
    await a.crons.delete(c["cron_id"])
    ok("threads of runs deleted")


async def check_thread(a, tid, cron_id, after_ms):
    await a.crons.delete(cron_id)
    since_restart = time.time() - after_ms / 1000
    await asyncio.sleep(0.5)
    runs = await wait_idle(a, tid)
    assert all(r["status"] == "success" for r in runs), runs
    after = datetime.fromtimestamp(after_ms / 1000, timezone.utc)
    later = [r for r in runs if datetime.fromisoformat(r["created_at"].replace("Z", "+00:00")) > after]
    tools = tool_lines()
    print(f"counts: runs={len(runs)} after_restart={len(later)} seconds_since_restart="
          f"{since_restart:.1f} tool_calls={tools.count(tid)}", flush=True)
    assert len(later) >= 2, (len(later), runs)
    # The ticks missed while no server ran are started once, not each: at most one run more
    # than the seconds since the restart.
    assert len(later) <= int(since_restart) + 1, (len(later), since_restart)
    assert tools.count(tid) == len(runs), (tools.count(tid), len(runs))
    ok("thread cron across a restart")


async def check_threadless(a, cron_id):
    await a.crons.update(cron_id, enabled=False)
    stopped = time.time()
    [cron] = [c for c in await a.crons.search(limit=100) if c["cron_id"] == cron_id]
    created = datetime.fromisoformat(cron["created_at"].replace("Z", "+00:00")).timestamp()
    # A tick at each whole second after the cron was made, up to when it was disabled (the
    # last one may not have been claimed yet).
    seconds = int(stopped) - int(created)
    await asyncio.sleep(0.5)
    threads = await a.threads.search(limit=1000)
    for x in threads:
        await wait_idle(a, x["thread_id"])
    runs = []
    for x in threads:
        runs.extend(await a.runs.list(x["thread_id"]))
    # Read again: a tick claimed just before the cron was disabled is counted when its run has
    # been stored, which may be after the first read.
    [cron] = [c for c in await a.crons.search(limit=100) if c["cron_id"] == cron_id]
    tools = tool_lines()
    dup = {s for s in tools if tools.count(s) > 1}
    print(f"counts: seconds={seconds} ticks={cron['ticks']} threads={len(threads)} runs={len(runs)} "
          f"tool_calls={len(tools)} distinct_tool_threads={len(set(tools))} repeated={len(dup)}",
          flush=True)
    assert not dup, f"a tick ran twice: {dup}"
    assert all(r["status"] == "success" for r in runs), [r for r in runs if r["status"] != "success"]
    assert len(runs) == len(threads) == cron["ticks"], (len(runs), len(threads), cron["ticks"])
    assert len(tools) == len(threads), (len(tools), len(threads))
    assert set(tools) == {x["thread_id"] for x in threads}
    assert seconds - 1 <= cron["ticks"] <= seconds, (cron["ticks"], seconds)
    await a.crons.delete(cron_id)
    ok("each tick once")


def open_claim(db, cron_id, tick):
    import sqlite3
    con = sqlite3.connect(db, timeout=30)
    with con:
        n = con.execute(
            "UPDATE crons SET claimed_tick = ?, claimed_by = 'a server that died', "
            "claim_expires = ? WHERE id = ?",
            (tick, int(time.time() * 1000) - 1, cron_id)).rowcount
    con.close()
    assert n == 1, n


async def taken_up(a, tid, cron_id, tick, ticks):
    since = time.time()
    while True:
        [cron] = [c for c in await a.crons.search(limit=100) if c["cron_id"] == cron_id]
        if cron["ticks"] >= ticks:
            break
        assert time.time() - since < 60, f"the claim was not taken up: {cron}"
        await asyncio.sleep(0.2)
    at = datetime.fromtimestamp(tick / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    last = cron["last_tick"]
    assert cron["ticks"] == ticks and last["at"] == at and last["error"] is None, cron
    await asyncio.sleep(1)
    runs = await wait_idle(a, tid)
    assert [r["run_id"] for r in runs] == [last["run_id"]], (runs, cron)
    assert runs[0]["status"] == "success", runs
    assert tool_lines().count(tid) == 1, tool_lines()
    print(f"counts: ticks={cron['ticks']} runs={len(runs)} tool_calls={len(tool_lines())}", flush=True)
    ok(f"claim taken up ({ticks})")


async def first_event_ms(tid):
    """When the first event of thread `tid`'s log was stored (Unix milliseconds)."""
    async with httpx.AsyncClient(base_url=URL, headers={"x-api-key": KEY}, timeout=30) as h:
        async with h.stream("GET", f"/sessions/{tid}/events") as r:
            assert r.status_code == 200, r.status_code
            name = ""
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: ") and name == "event":
                    return json.loads(line[6:])["ts"]
                elif name == "ready":
                    break
    raise AssertionError(f"thread {tid} has no events")


async def many(n, seconds, urls):
    clients = [get_client(url=urls[i % len(urls)], api_key=KEY, timeout=60) for i in range(n)]
    shared = (await clients[0].threads.create())["thread_id"]
    began = time.time()
    deleted_at = {}

    async def one(i, c):
        kept = await c.crons.create(
            "ticker", schedule="*/2 * * * * *", input=MSG, metadata={"client": i},
            on_run_completed="keep")
        doomed = await c.crons.create(
            "ticker", schedule="* * * * * *", input=MSG, metadata={"client": i, "doomed": True},
            on_run_completed="keep")
        on_shared = await c.crons.create_for_thread(
            shared, "ticker", schedule="0 0 1 1 *", input=MSG, metadata={"client": i})
        changed = await c.crons.update(on_shared["cron_id"], schedule="0 12 * * *", metadata={"client": i, "v": 2})
        assert changed["schedule"] == "0 12 * * *" and changed["metadata"]["v"] == 2, changed
        # The doomed cron ticks a second or two (from 1.0 to 2.9 s), then goes.
        await asyncio.sleep(1.0 + (i % 20) / 10)
        await c.crons.delete(doomed["cron_id"])
        deleted_at[doomed["cron_id"]] = time.time() * 1000
        status, _ = await status_of(c.crons.delete(doomed["cron_id"]))
        assert status == 404, status
        await c.crons.delete(on_shared["cron_id"])
        # The kept cron is changed again and again while it ticks.
        k = 0
        while time.time() - began < seconds:
            k += 1
            u = await c.crons.update(kept["cron_id"], metadata={"client": i, "k": k})
            assert u["metadata"]["k"] == k and u["enabled"], u
            await asyncio.sleep(0.3 + (i % 7) / 20)
        await c.crons.update(kept["cron_id"], enabled=False)
        return kept["cron_id"], doomed["cron_id"], on_shared["cron_id"]

    made = await asyncio.gather(*(one(i, c) for i, c in enumerate(clients)))
    ids = [x for m in made for x in m]
    assert len(set(ids)) == len(ids) == 3 * n, ids
    a = clients[0]
    await asyncio.sleep(1.0)
    left = await a.crons.search(limit=1000)
    assert sorted(c["cron_id"] for c in left) == sorted(m[0] for m in made), left
    assert await a.crons.count(thread_id=shared) == 0
    threads = [x["thread_id"] for x in await a.threads.search(limit=10000) if x["thread_id"] != shared]
    # A run lists its metadata (`cron_id`) on the server that started it only: a run read from
    # the log of another server's thread has none. Each thread's runs are listed on every server.
    per_server = [get_client(url=u, api_key=KEY, timeout=60) for u in urls]
    runs = []
    for tid in threads:
        await wait_idle(a, tid)
        found = {}
        for c in per_server:
            for r in await c.runs.list(tid, limit=1000):
                if r["run_id"] not in found or r["metadata"].get("cron_id"):
                    found[r["run_id"]] = r
        runs.extend(found.values())
    # Read again: a tick claimed just before its cron was disabled is counted once its run is
    # stored.
    left = {c["cron_id"]: c for c in await a.crons.search(limit=1000)}
    by_cron = {}
    for r in runs:
        by_cron.setdefault(r["metadata"].get("cron_id"), []).append(r)
    tools = tool_lines()
    dup = {s for s in tools if tools.count(s) > 1}
    late = []
    doomed_runs = 0
    for m in made:
        for r in by_cron.get(m[1], []):
            doomed_runs += 1
            stored = await first_event_ms(r["thread_id"])
            if stored > deleted_at[m[1]]:
                late.append((m[1], r["run_id"], stored - deleted_at[m[1]]))
    kept_ticks = sum(left[m[0]]["ticks"] for m in made)
    kept_runs = sum(len(by_cron.get(m[0], [])) for m in made)
    print(f"counts: clients={n} servers={len(urls)} seconds={time.time() - began:.1f} "
          f"threads={len(threads)} runs={len(runs)} kept_ticks={kept_ticks} kept_runs={kept_runs} "
          f"doomed_runs={doomed_runs} tool_calls={len(tools)} repeated={len(dup)} "
          f"late={len(late)}", flush=True)
    assert not dup, f"a tick ran twice: {dup}"
    assert not late, f"runs of deleted crons stored after the delete answered (cron, run, ms after): {late}"
    assert all(r["status"] == "success" for r in runs), [r for r in runs if r["status"] != "success"]
    assert set(by_cron) <= {m[0] for m in made} | {m[1] for m in made}, set(by_cron)
    assert len(runs) == len(threads) == len(tools), (len(runs), len(threads), len(tools))
    for m in made:
        c = left[m[0]]
        mine = by_cron.get(m[0], [])
        assert c["ticks"] == len(mine) and c["ticks"] >= 1, (c, len(mine))
        assert c["last_tick"]["error"] is None and c["last_tick"]["run_id"] in [r["run_id"] for r in mine], c
    for m in made:
        await a.crons.delete(m[0])
    ok("many clients")


async def main():
    a = get_client(url=URL, api_key=KEY, timeout=60)
    b = get_client(url=URL, api_key=OTHER, timeout=60)
    if MODE == "api":
        await api(a, b)
    elif MODE == "fire":
        await fire(a, int(ARGS[0]))
    elif MODE == "deleting":
        await deleting(a)
    elif MODE == "thread-cron":
        t = await a.threads.create()
        c = await a.crons.create_for_thread(t["thread_id"], "ticker", schedule="* * * * * *", input=MSG)
        print(f"thread: {t['thread_id']}\ncron: {c['cron_id']}", flush=True)
    elif MODE == "threadless-cron":
        c = await a.crons.create("ticker", schedule="* * * * * *", input=MSG, on_run_completed="keep")
        print(f"cron: {c['cron_id']}", flush=True)
    elif MODE == "check-thread":
        await check_thread(a, ARGS[0], ARGS[1], int(ARGS[2]))
    elif MODE == "check-threadless":
        await check_threadless(a, ARGS[0])
    elif MODE == "far-cron":
        t = await a.threads.create()
        c = await a.crons.create_for_thread(t["thread_id"], "ticker", schedule="0 0 1 1 *", input=MSG)
        print(f"thread: {t['thread_id']}\ncron: {c['cron_id']}", flush=True)
    elif MODE == "open-claim":
        open_claim(ARGS[0], ARGS[1], int(ARGS[2]))
    elif MODE == "many":
        await many(int(ARGS[0]), float(ARGS[1]), [URL] + ARGS[2:3])
    elif MODE == "taken-up":
        await taken_up(a, ARGS[0], ARGS[1], int(ARGS[2]), int(ARGS[3]))
    else:
        raise SystemExit(f"unknown mode {MODE}")


asyncio.run(main())
