"""Agents from Python: read from a file or built in code, run on weft's runtime, durably."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import queue
import threading
from typing import Any, AsyncIterator, Callable, Dict, Iterator, Mapping, Optional, Sequence, Union

from . import _weft
from ._tools import Tool

__all__ = ["Agent", "Result", "Event", "Stream", "WeftError", "Interrupted"]

WeftError = _weft.WeftError

Budget = Union[str, Mapping[str, Any], None]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run at its next safe point, as `weft run` stops: what was done is
    stored, and `agent.resume(e.session_id)` (from this process or another) goes on."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"interrupted; continue with agent.resume({session_id!r})")
        self.session_id = session_id


@dataclasses.dataclass(frozen=True)
class Result:
    """How a run ended. `status`: `completed`, `waiting` (for a person: `question` says what;
    answer with `Agent.answer`), `failed` (`error` says why) or `stopped` (another process
    cancelled or paused it, or this one was asked to stop)."""

    status: str
    session_id: str
    answer: Optional[str] = None
    question: Optional[str] = None
    wait_kind: Optional[str] = None
    error: Optional[str] = None
    data: Any = None
    usage: Dict[str, Any] = dataclasses.field(default_factory=dict)
    tool_calls: int = 0

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def waiting(self) -> bool:
        return self.status == "waiting"

    @classmethod
    def _read(cls, text: str) -> "Result":
        raw = json.loads(text)
        if raw.get("interrupted"):
            raise Interrupted(raw["session_id"])
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known and v is not None})


@dataclasses.dataclass(frozen=True)
class Event:
    """One event of a session's log, as `weft sessions events` prints it: its position
    (`seq`), time (`ts`, Unix milliseconds), `type` (`run_started`, `tool_call_finished`, ...)
    and the rest of its fields (`data`)."""

    seq: int
    ts: int
    type: str
    data: Dict[str, Any]

    @classmethod
    def _read(cls, line: str) -> "Event":
        raw = json.loads(line)
        seq, ts, kind = raw.pop("seq"), raw.pop("ts"), raw.pop("type")
        raw.pop("v", None)
        raw.pop("epoch", None)
        return cls(seq=seq, ts=ts, type=kind, data=raw)


def _budget(b: Budget) -> Optional[str]:
    if b is None or isinstance(b, str):
        return b
    return ",".join(f"{k}={v}" for k, v in b.items())


def _json(v: Any) -> Optional[str]:
    return None if v is None else json.dumps(v)


_END = object()


class Stream:
    """The events of a run as it goes (`for event in agent.stream(...)`), then its `result`.
    An error that refused the run is raised when the events end."""

    def __init__(self, start: Callable[[Callable[[str], None]], Result]) -> None:
        self._q: "queue.Queue[Any]" = queue.Queue()
        self.result: Optional[Result] = None
        self._error: Optional[BaseException] = None

        def work() -> None:
            try:
                self.result = start(self._q.put)
            except BaseException as e:  # raised to the reader when the events end
                self._error = e
            finally:
                self._q.put(_END)

        self._thread = threading.Thread(target=work, name="weft-run", daemon=True)
        self._thread.start()

    def _take(self, item: Any) -> Optional[Event]:
        """The event `item` holds; `None` at the end, where an error that refused the run is
        raised."""
        if item is not _END:
            return Event._read(item)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return None

    def __iter__(self) -> Iterator[Event]:
        while (event := self._take(self._q.get())) is not None:
            yield event

    async def __aiter__(self) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        while (event := self._take(await loop.run_in_executor(None, self._q.get))) is not None:
            yield event


class Agent:
    """An agent: a model, instructions and tools, whose sessions are kept in a store (`db`: a
    SQLite file, default `.weft/weft.db`, or a `postgres://` URL) and survive a crash.

    Build it in code, `Agent(name=..., model=..., instructions=..., tools=[...], mode=...,
    **fields)` (any other field of an agent file, as a keyword; `tools` may also hold an agent
    file's tool declarations as dicts, e.g. `{"builtin": "http_get"}` or `{"mcp": {...}}`), or
    read it from an agent file with `Agent.from_file(path, tools=[...])`; Python tools join
    the file's own."""

    def __init__(
        self,
        name: str,
        *,
        model: Optional[Union[str, Dict[str, Any]]] = None,
        instructions: Optional[str] = None,
        tools: Sequence[Union[Tool, Dict[str, Any]]] = (),
        mode: Optional[str] = None,
        db: Optional[str] = None,
        **fields: Any,
    ) -> None:
        spec: Dict[str, Any] = {"name": name}
        # Declarations of an agent file's tools (`{"builtin": "http_get"}`, `{"mcp": {...}}`,
        # a command, ...) go to the spec; Python tools are registered beside them.
        declared = [t for t in tools if isinstance(t, dict)]
        if declared:
            spec["tools"] = declared
        tools = [t for t in tools if not isinstance(t, dict)]
        if model is not None:
            spec["model"] = model
        if instructions is not None:
            spec["instructions"] = instructions
        if mode is not None:
            spec["mode"] = mode
        spec.update(fields)
        self._setup(
            db, f"<agent {name}>", json.dumps(spec), os.getcwd(), tools
        )

    @classmethod
    def from_file(
        cls, path: Union[str, "os.PathLike[str]"], *, tools: Sequence[Tool] = (), db: Optional[str] = None
    ) -> "Agent":
        """Reads an agent file (YAML or JSON); `tools` are Python tools it may call besides
        the file's own."""
        self = cls.__new__(cls)
        path = os.fspath(path)
        self._setup(db, path, None, os.path.dirname(path) or ".", tools)
        return self

    def _setup(
        self, db: Optional[str], path: str, text: Optional[str], base: str, tools: Sequence[Tool]
    ) -> None:
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        for t in tools:
            if not isinstance(t, Tool):
                raise TypeError(
                    f"tools: {t!r} is not a weft tool; decorate the function with @weft.tool"
                )
        given = [t._bound(lambda: self._loop) for t in tools]
        self._native = _weft.NativeAgent.load(db or os.environ.get("WEFT_DB"), path, text, base, given)

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def db(self) -> str:
        return self._native.db

    @property
    def tool_names(self) -> list:
        return list(self._native.tool_names())

    def run(
        self,
        task: str,
        *,
        session: Optional[str] = None,
        id: Optional[str] = None,
        input: Any = None,
        user: Optional[str] = None,
        reference: Optional[str] = None,
        metadata: Optional[Dict[str, Any]] = None,
        budget: Budget = None,
        on_event: Optional[Callable[[Event], None]] = None,
    ) -> Result:
        """Gives the agent a task (a new session; with `session`, another task for a session
        that ended) and drives it until it completes, fails or waits for a person. `budget`:
        `{"cost_usd": 0.5, "session.tool_calls": 100}` or the `--budget` text."""
        return self._run(
            task, session, id, input, user, reference, metadata, budget,
            None if on_event is None else (lambda line: on_event(Event._read(line))),
        )

    def _run(self, task, session, id, input, user, reference, metadata, budget, raw) -> Result:  # type: ignore[no-untyped-def]
        return Result._read(
            self._native.run(
                task, session, id, _json(input), user, reference, _json(metadata), _budget(budget), raw
            )
        )

    async def arun(self, task: str, **kwargs: Any) -> Result:
        """`run`, awaited: weft drives the session on its own threads, and the agent's async
        tools run on this event loop."""
        self._loop = asyncio.get_running_loop()
        return await self._loop.run_in_executor(None, lambda: self.run(task, **kwargs))

    def stream(self, task: str, **kwargs: Any) -> Stream:
        """`run`, yielding the session's events as they are stored (`for e in agent.stream(..)`
        or `async for`); the outcome is the stream's `result` once the events end."""
        if "on_event" in kwargs:
            raise TypeError("stream() yields the events; do not give on_event")
        keys = ("session", "id", "input", "user", "reference", "metadata", "budget")
        unknown = set(kwargs) - set(keys)
        if unknown:
            raise TypeError(f"stream() got unexpected keyword arguments: {sorted(unknown)}")
        args = [kwargs.get(k) for k in keys]
        return Stream(lambda put: self._run(task, *args, put))

    def answer(self, session: str, answer: str, *, budget: Budget = None, on_event: Optional[Callable[[Event], None]] = None) -> Result:
        """Answers the question session `session` waits on, and drives it on."""
        return self.run(answer, session=session, budget=budget, on_event=on_event)

    def resume(self, session: str, *, force: bool = False, on_event: Optional[Callable[[Event], None]] = None) -> Result:
        """Continues a session whose process stopped while it ran (killed, or the machine went
        down): calls of idempotent tools that were in flight run again, the others are recorded
        as unknown outcomes (never run twice), and the session goes on."""
        raw = None if on_event is None else (lambda line: on_event(Event._read(line)))
        return Result._read(self._native.resume(session, force, raw))

    def close(self) -> None:
        """Stops the agent's MCP servers (they stop at exit too)."""
        self._native.close()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<weft.Agent {self.name} db={self.db}>"
