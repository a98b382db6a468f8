"""N concurrent streaming runs against a LangGraph-API server (`weft serve` or `langgraph dev`),
through the official langgraph-sdk client.

Each of N asyncio tasks creates a thread, then streams one run in `updates` mode, and records the
time from its own start to the first `updates` event and to the end of the stream. A run is OK
when its stream ends without an exception or an `error` event and its last `updates` event holds
the scripted final answer (--final). All tasks start at once; the batch is bounded by
--deadline seconds (tasks still running then are cancelled and counted as unfinished). The
server's peak memory (VmHWM of --server-pid) and CPU seconds are read from /proc, the client's
own CPU seconds from getrusage.

Every 10 tasks share one client: the SDK's default client allows 100 connections with a 5 s
wait (N=1000 would fail with PoolTimeout), and one unlimited client burns a core in its pool.

usage: python serve_stream.py --url URL --assistant ID --final TEXT --n 1000 [--api-key K]
       [--server-pid PID] [--deadline 300]
Prints one JSON object.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time

from langgraph_sdk import get_client

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100 * len(xs) + 0.5)) - 1))]


async def one(client, assistant: str, final: str, t0: float, out: dict) -> None:
    start = time.perf_counter()
    first = None
    last_update = None
    error = None
    try:
        thread = await client.threads.create()
        async for part in client.runs.stream(
            thread["thread_id"], assistant,
            input={"messages": [{"role": "user", "content": "echo three times"}]},
            stream_mode="updates",
        ):
            if part.event == "updates":
                if first is None:
                    first = time.perf_counter() - start
                last_update = part.data
            elif part.event == "error":
                error = str(part.data)
    except Exception as e:  # noqa: BLE001 (every failure counts, none stops the batch)
        error = f"{type(e).__name__}: {e}"
    total = time.perf_counter() - start
    good = error is None and last_update is not None and final in json.dumps(last_update)
    out["ok" if good else "bad"] += 1
    if good:
        out["first"].append(first)
        out["total"].append(total)
    elif error and len(out["errors"]) < 5:
        out["errors"].append(error)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--assistant", required=True)
    ap.add_argument("--final", required=True)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--api-key")
    ap.add_argument("--server-pid", type=int)
    ap.add_argument("--deadline", type=float, default=300)
    a = ap.parse_args()
    clients = [get_client(url=a.url, api_key=a.api_key) for _ in range((a.n + 9) // 10)]
    out = {"ok": 0, "bad": 0, "first": [], "total": [], "errors": []}
    cpu0 = cpu_s(a.server_pid) if a.server_pid else None
    own0 = own_cpu_s()
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(one(clients[k // 10], a.assistant, a.final, t0, out)) for k in range(a.n)]
    done, pending = await asyncio.wait(tasks, timeout=a.deadline)
    for t in pending:
        t.cancel()
    wall = time.perf_counter() - t0
    print(json.dumps({
        "n": a.n,
        "ok": out["ok"],
        "failed": out["bad"],
        "unfinished": len(pending),
        "wall_s": round(wall, 3),
        "runs_per_s": round(out["ok"] / wall, 1),
        "first_p50_s": pct(out["first"], 50),
        "first_p99_s": pct(out["first"], 99),
        "total_p50_s": pct(out["total"], 50),
        "total_p99_s": pct(out["total"], 99),
        "client_cpu_s": round(own_cpu_s() - own0, 2),
        "server_peak_mb": round(hwm_mb(a.server_pid), 1) if a.server_pid else None,
        "server_cpu_s": round(cpu_s(a.server_pid) - cpu0, 1) if a.server_pid else None,
        "errors": out["errors"],
    }))


asyncio.run(main())
