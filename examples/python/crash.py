"""A crash and a resume: the process dies in the middle of a call, a new one goes on.

    python examples/python/crash.py run       # dies (SIGKILL) while `charge` runs
    python examples/python/crash.py resume SESSION

`look_up` is idempotent: after the crash it runs again. `charge` is not: it may have charged,
so weft records its outcome as unknown and never runs it twice; the model is told so.
"""

import os
import signal
import sys

import weft

HERE = os.path.dirname(os.path.abspath(__file__))


@weft.tool(idempotent=True)
def look_up(order: str) -> dict:
    """Looks an order up."""
    return {"order": order, "amount": 25}


@weft.tool
def charge(order: str, amount: float) -> str:
    """Charges a customer for an order."""
    if sys.argv[1] == "run":
        print(f"charging {order}... and the process dies", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return f"charged {amount} for {order}"


agent = weft.Agent(
    "billing",
    mode="react",
    model=f"scripted:{HERE}/scripts/charge.yaml",
    instructions="You bill orders.",
    tools=[look_up, charge],
)

if sys.argv[1] == "run":
    agent.run("Bill order o-9.", id=sys.argv[2] if len(sys.argv) > 2 else None)
else:
    result = agent.resume(sys.argv[2])
    print(f"{result.status}: {result.answer}")
