"""Many concurrent streaming runs through `weft serve`, with the server killed (SIGKILL) and
started again in some rounds, driven with the official langgraph-sdk client.

Usage: seam_client.py URL KEY WORKDIR ROUNDS N KILL_EVERY [replicas|outage]

Each round creates N threads and streams a run of the `tally` agent on each at once (the agent
calls its tool `tally` once, which is not idempotent and logs its start and end in
WORKDIR/tally.log, then answers). In every KILL_EVERY-th round (0: none), once 30 % of the
streams have begun, the script writes WORKDIR/kill-R; the test kills the server with SIGKILL,
writes WORKDIR/killed-R (the time of the kill, in Unix ms), and starts the server again, whose
log is WORKDIR/serve-K.log (K counting servers from 0). The SDK reconnects by itself.

With `replicas`, URL is a balancer in front of several servers and workers on one store, whose
logs are WORKDIR/serve-*.log and WORKDIR/worker-*.log: the test kills one server at each kill
(the others go on), and any of them may continue a run of a killed round.

With `outage`, no process dies: at WORKDIR/kill-R the test takes the server's database away
(crashes or restarts PostgreSQL, for less than a lease) and writes WORKDIR/killed-R once it is
back. The server keeps its runs' leases through it, so more is checked: no call has an unknown
outcome (its result was in the server's hands), no run was continued by another owner (no
`continuing a run whose server stopped`, no run written at two lease epochs), and every
acknowledged run still ends `end` and success with no `error`. A request the server refused
during the outage (it never acknowledged a run) is allowed; its thread ends idle.

Checked, and counted:
- every run the server acknowledged (its stream began) ends with `end` and success, with no
  `error` event and no gap or repeat in its event ids across reconnects;
- a request that got no answer (the kill came first) may or may not have started a run; its
  thread ends idle either way (nothing is left running or failed);
- the tool ran at most once per call (its start lines), and a call reported `unknown_outcome`
  is one whose start was stored before a kill of its round, by the owner before the one that
  recorded the outcome;
- a run whose events were written at more than one lease epoch moved to another process
  mid-stream (counted as `moved`; `takeover_ms_max`: the longest from a kill to a moved run's
  first event written by its next owner);
- no server continued a run that was live: a server's log names as continued only threads of
  the round killed just before it started, and no log has a write refused for another writer.
Prints `counts: ...` and `ok: seam`; the first failed assertion ends the script (exit 1).
"""
import asyncio
import glob
import os
import re
import sys
import time

from langgraph_sdk import get_client

URL, KEY, WORK = sys.argv[1:4]
ROUNDS, N, KILL_EVERY = (int(a) for a in sys.argv[4:7])
MODE = sys.argv[7] if len(sys.argv) > 7 else ""
assert MODE in ("", "replicas", "outage"), f"unknown mode {MODE!r}"
REPLICAS = MODE == "replicas"
OUTAGE = MODE == "outage"
MSG = {"messages": [{"role": "user", "content": "tally one"}]}


def path(name):
    return os.path.join(WORK, name)


async def one(client, began):
    """One thread and its streamed run: (thread id, parts, error or None)."""
    parts = []
    try:
        t = await client.threads.create()
    except Exception as e:  # the server was killed before it answered
        return None, parts, repr(e)
    tid = t["thread_id"]
    try:
        async for p in client.runs.stream(tid, "tally", input=MSG, stream_mode="custom"):
            if p.event == "metadata":
                began.append(tid)
            parts.append((p.event, p.data))
    except Exception as e:
        return tid, parts, repr(e)
    return tid, parts, None


async def kill_when_begun(r, began):
    since = time.time()
    while len(began) < max(1, N * 3 // 10):
        assert time.time() - since < 120, f"round {r}: only {len(began)} streams began"
        await asyncio.sleep(0.01)
    open(path(f"kill-{r}"), "w").close()
    while not os.path.exists(path(f"killed-{r}")):
        await asyncio.sleep(0.01)


async def main():
    client = get_client(url=URL, api_key=KEY, timeout=120)
    counts = dict(runs=0, acknowledged=0, unanswered=0, kills=0, tool_runs=0,
                  unknown_outcome=0, continued=0, moved=0)
    unknown = []  # (round, idempotency key)
    moved = []  # (round, when the run's next owner wrote its first event, Unix ms)
    round_threads = {}
    kill_rounds = []
    for r in range(ROUNDS):
        began = []
        killing = KILL_EVERY > 0 and r % KILL_EVERY == KILL_EVERY - 1
        jobs = [one(client, began) for _ in range(N)]
        if killing:
            killer = asyncio.ensure_future(kill_when_begun(r, began))
        results = await asyncio.gather(*jobs)
        if killing:
            await killer
            kill_rounds.append(r)
            counts["kills"] += 1
        round_threads[r] = {tid for tid, _, _ in results if tid}
        for tid, parts, err in results:
            counts["runs"] += 1
            acked = any(e == "metadata" for e, _ in parts)
            if not acked:
                # Never acknowledged: only a kill can explain it.
                assert killing and err is not None, (r, tid, err, parts)
                counts["unanswered"] += 1
                continue
            counts["acknowledged"] += 1
            assert err is None, f"round {r}: thread {tid}: acknowledged, then {err}; parts {parts}"
            events = [e for e, _ in parts]
            assert "error" not in events, (r, tid, parts)
            assert events[-1] == "end" and parts[-1][1]["status"] == "success", (r, tid, parts)
            custom = [d for e, d in parts if e == "custom"]
            seqs = [d["seq"] for d in custom]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), (r, tid, seqs)
            kinds = [d["type"] for d in custom]
            # Written by more than one owner: the run moved to another process mid-stream.
            if len({d["epoch"] for d in custom}) > 1:
                counts["moved"] += 1
                moved.append((r, next(d["ts"] for d in custom if d["epoch"] != custom[0]["epoch"])))
            assert kinds[-1] == "run_finished" and kinds.count("tool_call_finished") == 1, (r, tid, kinds)
            started = {d["call_id"]: d for d in custom if d["type"] == "tool_call_started"}
            for d in custom:
                if d["type"] == "tool_call_finished" and d["outcome"]["status"] == "error":
                    assert d["outcome"]["error"]["kind"] == "unknown_outcome", (r, tid, d)
                    unknown.append((r, started[d["call_id"]], d))
        # Every thread ends idle: nothing is left running (a run whose request got no answer
        # is finished by the server without a client), nothing failed.
        for tid in round_threads[r]:
            since = time.time()
            while (status := (await client.threads.get(tid))["status"]) == "busy":
                assert time.time() - since < 60, (r, tid, "still busy after 60 s")
                await asyncio.sleep(0.2)
            assert status == "idle", (r, tid, status)
        print(f"round {r}: {len(results)} streams{' (killed)' if killing else ''}", flush=True)

    # The side-effecting tool: at most one run per call; unknown outcomes only for calls that
    # started before a kill of their round.
    starts = {}
    for line in open(path("tally.log")).read().splitlines():
        what, key, ms = line.split()
        if what == "start":
            starts.setdefault(key, []).append(int(ms) // 1_000_000)
    counts["tool_runs"] = sum(len(v) for v in starts.values())
    repeated = {k: v for k, v in starts.items() if len(v) > 1}
    assert not repeated, f"tool calls run more than once: {repeated}"
    # Through an outage the server held its leases: every call's result was in its hands.
    assert not (OUTAGE and unknown), (
        "calls recorded as unknown outcomes although their server held the lease through the "
        f"outage: {[(r, s['idempotency_key'], f['outcome']) for r, s, f in unknown]}")
    # Nor did any run change owner (a new lease epoch) while its server was alive.
    assert not (OUTAGE and moved), f"runs written at two lease epochs through an outage: {moved}"
    for r, start, finish in unknown:
        key = start["idempotency_key"]
        assert r in kill_rounds, f"round {r} had no kill, yet call {key} has an unknown outcome"
        # In flight at the kill: its start was stored before the kill, by the owner before the
        # one that recorded the unknown outcome (the tool itself may have begun after the kill:
        # its process outlives the server's).
        killed_at = int(open(path(f"killed-{r}")).read())
        assert start["ts"] <= killed_at and start["epoch"] < finish["epoch"], (r, start, finish, killed_at)
    counts["unknown_outcome"] = len(unknown)
    # How long after the kill the last moved run was taken over.
    took = [ts - int(open(path(f"killed-{r}")).read()) for r, ts in moved if r in kill_rounds]
    counts["takeover_ms_max"] = max(took, default=0)

    # No live run continued, no write refused: server K (K >= 1) started after the K-th kill.
    # With replicas, every server and worker may continue a run of any killed round.
    if OUTAGE:
        # One server, never restarted: it may continue no run as an orphan.
        logs = [("serve-0.log", set())]
    elif REPLICAS:
        killed = set().union(*(round_threads[r] for r in kill_rounds))
        logs = [(os.path.basename(f), killed)
                for f in sorted(glob.glob(path("serve-*.log")) + glob.glob(path("worker-*.log")))]
    else:
        logs = [(f"serve-{k}.log", round_threads[kill_rounds[k - 1]] if k >= 1 else set())
                for k in range(counts["kills"] + 1)]
    continued = 0
    for name, allowed in logs:
        log = open(path(name)).read()
        assert "changed by another writer" not in log, f"{name}:\n{log}"
        adopted = re.findall(r"thread=(\S+).*continuing a run whose server stopped|"
                             r"continuing a run whose server stopped.*thread=(\S+)", log)
        ids = {a or b for a, b in adopted}
        continued += len(ids)
        assert ids <= allowed, f"{name} continued live runs: {sorted(ids - allowed)}"
    counts["continued"] = continued
    if OUTAGE:
        assert continued == 0, f"runs continued as orphans through an outage: {continued}"
    print("counts: " + ", ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
    print("ok: seam", flush=True)


asyncio.run(main())
