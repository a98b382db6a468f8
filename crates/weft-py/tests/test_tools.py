"""`@weft.tool`: schemas from type hints, docstrings, results and errors as weft records them."""

import enum
import json
from typing import Dict, List, Literal, Optional

import pydantic
import pytest

import weft
from conftest import calls


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Order(pydantic.BaseModel):
    id: str
    amount: float


def test_the_schema_comes_from_the_type_hints_and_the_description_from_the_docstring():
    @weft.tool(idempotent=True)
    def find(city: str, days: int, units: Literal["c", "f"] = "c", tags: Optional[List[str]] = None,
             color: Color = Color.RED, extra: Dict[str, float] = {}) -> dict:
        """Finds the weather.

        More words."""
        return {}

    assert find.name == "find"
    assert find.description.startswith("Finds the weather.")
    s = find.input_schema
    assert s["required"] == ["city", "days"]
    assert s["properties"]["city"] == {"type": "string"}
    assert s["properties"]["days"] == {"type": "integer"}
    assert s["properties"]["units"] == {"enum": ["c", "f"]}
    assert s["properties"]["tags"] == {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
    assert s["properties"]["color"] == {"enum": ["red", "blue"]}
    assert s["properties"]["extra"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert s["additionalProperties"] is False
    assert find.idempotent and not find.approval
    # Still a function.
    assert find(city="x", days=1) == {}


def test_a_pydantic_parameter_has_its_own_schema_and_is_built_from_the_arguments(script):
    seen = []

    @weft.tool
    def refund(order: Order, ctx: weft.Context) -> Order:
        """Refunds an order."""
        seen.append((order, ctx))
        return Order(id=order.id, amount=-order.amount)

    assert refund.input_schema["properties"]["order"]["properties"]["amount"] == {"title": "Amount", "type": "number"}
    assert "ctx" not in refund.input_schema["properties"]
    model = script([calls(("refund", {"order": {"id": "o1", "amount": 5}})), {"text": "done"}])
    agent = weft.Agent("r", model=model, mode="react", instructions="x", tools=[refund])
    events = []
    r = agent.run("refund o1", on_event=events.append)
    assert r.completed, r
    order, ctx = seen[0]
    assert isinstance(order, Order) and order.amount == 5
    assert ctx.session_id == r.session_id and ctx.attempt == 1 and ctx.call_id
    done = [e for e in events if e.type == "tool_call_finished"][0]
    assert done.data["outcome"] == {"status": "ok", "output": {"id": "o1", "amount": -5.0}}


def test_a_type_weft_cannot_describe_is_refused_when_the_tool_is_made():
    class Thing:
        pass

    with pytest.raises(TypeError, match=r"tool `f`: parameter `t`: weft cannot write a JSON Schema"):
        @weft.tool
        def f(t: Thing) -> None:
            pass

    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs"):
        @weft.tool
        def g(*names: str) -> None:
            pass


def test_a_tool_that_raises_fails_its_call_and_the_model_sees_why(script):
    @weft.tool
    def lookup(city: str) -> str:
        """Looks a city up."""
        raise ValueError(f"no such city: {city}")

    @weft.tool
    def strict(n: int) -> str:
        """Fails with a kind of its own."""
        raise weft.ToolError("quota reached", kind="quota", detail={"left": 0}, retryable=False)

    @weft.tool
    def weird() -> object:
        """Returns what JSON cannot hold."""
        return object()

    model = script([calls(("lookup", {"city": "Atlantis"}), ("strict", {"n": 1}), ("weird", {})), {"text": "sorry"}])
    agent = weft.Agent("e", model=model, mode="react", instructions="x", tools=[lookup, strict, weird])
    events = []
    r = agent.run("where?", on_event=events.append)
    assert r.completed and r.answer == "sorry"
    outcomes = {e.data["call_id"]: e.data["outcome"] for e in events if e.type == "tool_call_finished"}
    errors = sorted(o["error"]["kind"] for o in outcomes.values())
    assert errors == ["exception", "invalid_output", "quota"], outcomes
    by_kind = {o["error"]["kind"]: o["error"] for o in outcomes.values()}
    assert by_kind["exception"]["message"] == "ValueError: no such city: Atlantis"
    assert "Traceback" in by_kind["exception"]["detail"]["traceback"]
    assert by_kind["quota"]["detail"] == {"left": 0}
    assert "not JSON" in by_kind["invalid_output"]["message"]
    # The errors went back to the model: its second request holds them.
    replied = [e for e in events if e.type == "model_replied"]
    assert len(replied) == 2


def test_arguments_that_break_the_schema_never_reach_the_function(script):
    ran = []

    @weft.tool
    def add(a: int, b: int) -> int:
        """Adds."""
        ran.append((a, b))
        return a + b

    model = script([calls(("add", {"a": "two", "b": 3})), {"text": "ok"}])
    agent = weft.Agent("a", model=model, mode="react", instructions="x", tools=[add])
    events = []
    assert agent.run("add", on_event=events.append).completed
    assert ran == []
    refused = [e for e in events if e.type in ("tool_call_finished", "tool_call_refused")]
    assert refused and "invalid" in json.dumps(refused[0].data)
