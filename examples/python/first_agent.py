"""A first agent with two Python tools.

    python examples/python/first_agent.py "Where is it sunnier, Lisbon or Oslo?"

The model is a script (no API key needed); put `model="openai:gpt-4o-mini"` (with
OPENAI_API_KEY set) to give the same agent to a real model.
"""

import os
import sys

import weft

HERE = os.path.dirname(os.path.abspath(__file__))


@weft.tool(idempotent=True)
def get_weather(city: str) -> dict:
    """Current weather for a city."""
    sunny = city.lower() in ("lisbon", "seville", "athens")
    return {"city": city, "sky": "sunny" if sunny else "cloudy", "celsius": 24 if sunny else 12}


@weft.tool(idempotent=True)
def to_fahrenheit(celsius: float) -> float:
    """Converts a temperature from Celsius to Fahrenheit."""
    return round(celsius * 9 / 5 + 32, 1)


agent = weft.Agent(
    "weather",
    mode="react",
    model=f"scripted:{HERE}/scripts/weather.yaml",
    instructions="You answer questions about the weather. Use get_weather for facts.",
    tools=[get_weather, to_fahrenheit],
)

task = sys.argv[1] if len(sys.argv) > 1 else "Where is it sunnier, Lisbon or Oslo?"
stream = agent.stream(task)
for event in stream:
    if event.type == "tool_call_started":
        print(f"call  {event.data['tool']}({event.data['args']})")
result = stream.result
print(result.answer)
print(f"session {result.session_id}: {result.tool_calls} tool calls, kept in {agent.db}")
