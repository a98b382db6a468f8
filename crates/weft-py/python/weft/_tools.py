"""Python functions as weft tools: `@weft.tool`, the input schema read from type hints, and
the call weft makes (on a thread of its own; an async function on an event loop)."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import json
import threading
import traceback
import typing
from typing import Any, Callable, Dict, List, Optional, Union

__all__ = ["tool", "Tool", "Context", "ToolError"]


@dataclasses.dataclass(frozen=True)
class Context:
    """What a tool knows about the call it serves. Declare a parameter of this type to get it
    (it is not part of the tool's input schema)."""

    session_id: str
    call_id: str
    idempotency_key: str
    attempt: int
    step: Optional[str] = None


class ToolError(Exception):
    """Raise it from a tool to fail the call with a kind of your own (`kind`), what helps
    the model (`detail`, JSON), and whether trying again may succeed (`retryable`). Any other
    exception fails the call as kind `exception`, its message `Type: text`."""

    def __init__(
        self, message: str, *, kind: str = "tool_error", detail: Any = None, retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.detail = detail
        self.retryable = retryable


def _is_pydantic(t: Any) -> bool:
    return isinstance(t, type) and hasattr(t, "model_json_schema") and hasattr(t, "model_validate")


def _schema(t: Any, where: str) -> Dict[str, Any]:
    """The JSON Schema of a type hint."""
    if t is inspect.Parameter.empty or t is Any:
        return {}
    if t is None or t is type(None):
        return {"type": "null"}
    if _is_pydantic(t):
        return t.model_json_schema()
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is Union or (origin is not None and getattr(origin, "__name__", "") == "UnionType"):
        return {"anyOf": [_schema(a, where) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, List, tuple, set, frozenset) or t in (list, tuple, set):
        item = args[0] if args else Any
        return {"type": "array", "items": _schema(item, where)}
    if origin in (dict, Dict) or t is dict:
        value = args[1] if len(args) == 2 else Any
        return {"type": "object", "additionalProperties": _schema(value, where)}
    if t is bool:
        return {"type": "boolean"}
    if t is int:
        return {"type": "integer"}
    if t is float:
        return {"type": "number"}
    if t is str:
        return {"type": "string"}
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return {"enum": [m.value for m in t]}
    if dataclasses.is_dataclass(t) and isinstance(t, type):
        hints = typing.get_type_hints(t)
        props = {f.name: _schema(hints.get(f.name, Any), where) for f in dataclasses.fields(t)}
        required = [
            f.name
            for f in dataclasses.fields(t)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        return {"type": "object", "properties": props, "required": required}
    if isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__total__"):  # a TypedDict
        hints = typing.get_type_hints(t)
        return {
            "type": "object",
            "properties": {k: _schema(v, where) for k, v in hints.items()},
            "required": sorted(getattr(t, "__required_keys__", hints.keys())),
        }
    raise TypeError(
        f"{where}: weft cannot write a JSON Schema for the type {t!r}; use str, int, float, "
        "bool, list, dict, Literal, an Enum, a dataclass, a TypedDict or a Pydantic model, "
        "or pass input_schema= to @weft.tool"
    )


def _jsonable(value: Any) -> Any:
    """A tool's result as JSON-ready data."""
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    return value


class _Loops:
    """Where a tool's coroutine runs: the event loop of the `arun` that drives the agent, else a
    loop of weft's own on a background thread."""

    _own: Optional[asyncio.AbstractEventLoop] = None
    _lock = threading.Lock()

    @classmethod
    def own(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._own is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="weft-tools", daemon=True).start()
                cls._own = loop
            return cls._own


class Tool:
    """A Python function as a weft tool; made by `@weft.tool`. Calling it calls the function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        input_schema: Optional[Dict[str, Any]] = None,
        idempotent: bool = False,
        approval: bool = False,
        parallel: bool = True,
        category: Optional[str] = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.description = description or inspect.getdoc(fn) or ""
        self.idempotent = idempotent
        self.approval = approval
        self.parallel = parallel
        self.category = category
        self.is_async = inspect.iscoroutinefunction(fn)
        where = f"tool `{self.name}`"
        sig = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn)
        except Exception as e:  # an annotation that does not resolve
            raise TypeError(f"{where}: its type hints do not resolve: {e}") from e
        self._context: Optional[str] = None
        self._models: Dict[str, Any] = {}
        props: Dict[str, Any] = {}
        required: List[str] = []
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(
                    f"{where}: parameter `{p.name}`: *args and **kwargs cannot be described to "
                    "a model; name each argument"
                )
            hint = hints.get(p.name, p.annotation)
            if hint is Context:
                self._context = p.name
                continue
            if _is_pydantic(hint):
                self._models[p.name] = hint
            props[p.name] = _schema(hint, f"{where}: parameter `{p.name}`")
            if p.default is inspect.Parameter.empty:
                required.append(p.name)
        self.input_schema = input_schema or {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
        }
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<weft.Tool {self.name}>"

    def _info(self) -> str:
        return json.dumps(
            {
                "name": self.name,
                "description": self.description,
                "category": self.category,
                "input_schema": self.input_schema,
                "idempotent": self.idempotent,
                "parallel": self.parallel,
                "requires_approval": self.approval,
            }
        )

    def _bound(self, loop_of: Callable[[], Optional[asyncio.AbstractEventLoop]]) -> Any:
        """The pair weft registers: the description, and the call weft makes."""

        def invoke(args_json: str, context_json: str) -> str:
            return self._invoke(args_json, context_json, loop_of)

        return (self._info(), invoke)

    def _invoke(
        self,
        args_json: str,
        context_json: str,
        loop_of: Callable[[], Optional[asyncio.AbstractEventLoop]],
    ) -> str:
        try:
            kwargs = json.loads(args_json)
            for k, model in self._models.items():
                if k in kwargs:
                    kwargs[k] = model.model_validate(kwargs[k])
            if self._context is not None:
                kwargs[self._context] = Context(**json.loads(context_json))
            if self.is_async:
                loop = loop_of()
                if loop is None or loop.is_closed() or not loop.is_running():
                    loop = _Loops.own()
                result = asyncio.run_coroutine_threadsafe(self.fn(**kwargs), loop).result()
            else:
                result = self.fn(**kwargs)
            result = _jsonable(result)
            try:
                return json.dumps({"ok": result})
            except (TypeError, ValueError) as e:
                return json.dumps(
                    {
                        "error": {
                            "kind": "invalid_output",
                            "message": f"tool `{self.name}` returned a {type(result).__name__}, "
                            f"which is not JSON: {e}; return str, numbers, bools, None, lists, "
                            "dicts, a dataclass or a Pydantic model",
                        }
                    }
                )
        except ToolError as e:
            return json.dumps(
                {
                    "error": {
                        "kind": e.kind,
                        "message": str(e),
                        "detail": e.detail,
                        "retryable": e.retryable,
                    }
                },
                default=str,
            )
        except Exception as e:
            return json.dumps(
                {
                    "error": {
                        "kind": "exception",
                        "message": f"{type(e).__name__}: {e}",
                        "detail": {"traceback": traceback.format_exc(limit=8)},
                    }
                }
            )


@typing.overload
def tool(fn: Callable[..., Any]) -> Tool: ...


@typing.overload
def tool(
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    input_schema: Optional[Dict[str, Any]] = None,
    idempotent: bool = False,
    approval: bool = False,
    parallel: bool = True,
    category: Optional[str] = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(fn: Optional[Callable[..., Any]] = None, **options: Any) -> Any:
    """Makes a Python function (sync or async) a weft tool. Its input schema comes from the
    type hints (a Pydantic model's own schema when a parameter is one), its description from
    the docstring. `idempotent=True`: safe to run again after a crash (else a call that may
    have run is recorded as an unknown outcome); `approval=True`: a person approves each call;
    `parallel=False`: never at the same time as other steps."""
    if fn is not None:
        return Tool(fn, **options)
    return lambda f: Tool(f, **options)
