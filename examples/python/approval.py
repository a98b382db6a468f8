"""A wait answered later: a refund waits for a person's approval, durably.

    python examples/python/approval.py ask refund-17      # waits (the session's id: refund-17)
    python examples/python/approval.py answer refund-17   # later, from any process: approve

Between the two the process can end, the machine restart: the wait is in the store.
"""

import os
import sys

import weft

HERE = os.path.dirname(os.path.abspath(__file__))


@weft.tool(approval=True)
def refund(order: str, amount: float) -> str:
    """Refunds an amount for an order."""
    return f"refunded {amount} for {order}"


agent = weft.Agent(
    "refunds",
    mode="react",
    model=f"scripted:{HERE}/scripts/refund.yaml",
    instructions="You refund orders.",
    tools=[refund],
)

if sys.argv[1] == "ask":
    result = agent.run("Refund order o-17, 25 euros.", id=sys.argv[2] if len(sys.argv) > 2 else None)
    print(f"{result.status}: {result.question}")
    print(f"answer with: python {sys.argv[0]} answer {result.session_id}")
else:
    result = agent.answer(sys.argv[2], "approve")
    print(f"{result.status}: {result.answer}")
