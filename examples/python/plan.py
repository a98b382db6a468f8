"""A plan with no model: a data-flow graph of Python tool calls, run in parallel waves.

    python examples/python/plan.py

`price` runs for both items at once (one wave), `total` after them; the plan's state is the
result's `data`.
"""

import weft

PRICES = {"apple": 1.5, "pear": 2.0}


@weft.tool(idempotent=True)
def price(item: str) -> float:
    """The price of an item."""
    return PRICES[item]


@weft.tool(idempotent=True)
def total(prices: list) -> float:
    """Adds prices up."""
    return sum(prices)


plan = {
    "steps": [
        {"_id": "apple", "_tool": "price", "item": "apple", "_outputPath": "†state.apple"},
        {"_id": "pear", "_tool": "price", "item": "†input.second", "_outputPath": "†state.pear"},
        {"_id": "sum", "_tool": "total", "prices": ["†state.apple", "†state.pear"],
         "_outputPath": "†state.total"},
    ]
}

result = weft.plan.run(plan, tools=[price, total], input={"second": "pear"})
print(result.status, dict(sorted(result.data.items())))
