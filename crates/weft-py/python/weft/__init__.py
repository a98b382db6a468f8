"""weft, the durable agent runtime, from Python.

    import weft

    @weft.tool(idempotent=True)
    def get_weather(city: str) -> dict:
        '''Current weather for a city.'''
        return {"city": city, "sky": "sunny"}

    agent = weft.Agent("weather", model="openai:gpt-4o-mini", mode="react",
                       instructions="Answer weather questions.", tools=[get_weather])
    result = agent.run("Is it sunny in Lisbon?")
    print(result.answer, result.session_id)

Sessions are kept in `.weft/weft.db` (or `db=`, a SQLite path or a `postgres://` URL): kill
the process and `agent.resume(session_id)` goes on where it stopped, from a new one.
"""

from . import plan
from ._agent import Agent, Event, Interrupted, Result, Stream, WeftError
from ._tools import Context, Tool, ToolError, tool

__all__ = [
    "Agent", "Context", "Event", "Interrupted", "Result", "Stream", "Tool", "ToolError",
    "WeftError", "plan", "tool",
]


def _finish() -> None:
    from . import _weft

    _weft._finish()


import atexit as _atexit

_atexit.register(_finish)
