"""Plans with no model: a data-flow graph of tool calls, run in parallel waves, durably.

    result = weft.plan.run({"steps": [...], "output": ...}, tools=[lookup, total])
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Optional, Sequence, Union

from . import _weft
from ._agent import Event, Result
from ._tools import Tool

__all__ = ["run"]


def run(
    plan: Union[Dict[str, Any], str, "os.PathLike[str]"],
    *,
    tools: Sequence[Tool] = (),
    agent: Optional[Union[str, "os.PathLike[str]"]] = None,
    input: Any = None,
    db: Optional[str] = None,
    id: Optional[str] = None,
    user: Optional[str] = None,
    on_event: Optional[Callable[[Event], None]] = None,
) -> Result:
    """Runs `plan` (a dict, JSON text, or the path of a plan file) with the Python `tools`
    and, when given, the tools of the agent file `agent`. The plan's output is the result's
    `data`. A plan weft refuses raises `weft.WeftError` listing every problem."""
    if isinstance(plan, dict):
        text, where = json.dumps(plan), "the plan"
    elif isinstance(plan, os.PathLike) or (isinstance(plan, str) and not plan.lstrip().startswith("{")):
        where = f"plan {os.fspath(plan)}"
        with open(plan, encoding="utf-8") as f:
            text = f.read()
    else:
        text, where = str(plan), "the plan"
    for t in tools:
        if not isinstance(t, Tool):
            raise TypeError(f"tools: {t!r} is not a weft tool; decorate the function with @weft.tool")
    given = [t._bound(lambda: None) for t in tools]
    raw = None if on_event is None else (lambda line: on_event(Event._read(line)))
    out = json.loads(
        _weft.run_plan(
            text,
            given,
            db or os.environ.get("WEFT_DB"),
            None if agent is None else os.fspath(agent),
            None if input is None else json.dumps(input),
            id,
            user,
            raw,
        )
    )
    if out["status"] == "refused":
        problems = out["problems"]
        lines = "\n".join(f"  - {_problem(p)}" for p in problems)
        raise _weft.WeftError(f"{where} has {len(problems)} problem(s):\n{lines}")
    return Result._read(json.dumps(out))


def _problem(p: Dict[str, Any]) -> str:
    where = p.get("path") or p.get("step") or ""
    msg = p.get("message", json.dumps(p))
    return f"{where}: {msg}" if where else msg
