#!/usr/bin/env python3
"""Serves workflow py.order: charge, a durable second, an approval, shipping.

    make                                   # builds bin/cairn-worker
    DATABASE_URL=postgresql://... python3 sdk/python/examples/order.py
    cairn enqueue py.order --group python --input '{"item": "book", "amount": 12}'
    cairn signal RUN approval '{"by": "ann"}'
    cairn result RUN

It starts cairn-worker beside it (the engine: leases, journal, database)
and serves until SIGTERM or Ctrl-C, letting the engine drain.
"""
import datetime
import os
import sys
import uuid

# Run from the repository without installing the package: use the SDK that
# sits beside this example.
SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isfile(os.path.join(SDK_DIR, "cairn", "__init__.py")):
    sys.path.insert(0, SDK_DIR)

import cairn  # noqa: E402

worker = cairn.Worker()


def charge(item: str, amount: float) -> str:
    """The payment call (a real one would call a payment API and may raise:
    the step is then retried). A bad amount is no reason to retry."""
    if not isinstance(amount, (int, float)) or amount <= 0:
        raise cairn.Fail(f"amount must be a positive number, not {amount!r}")
    return f"ch_{uuid.uuid4().hex[:12]}"


def ship(item: str) -> str:
    """The carrier's API; its tracking number."""
    return f"TRK-{uuid.uuid4().hex[:8].upper()}"


@worker.workflow("py.order")
def order(ctx: cairn.Context, order: dict) -> dict:
    """Charges, waits a second, waits up to an hour for approval, ships."""
    charge_id = ctx.step("charge", charge, order["item"], order["amount"],
                         retry=cairn.RetryPolicy(max_attempts=5, initial_backoff=1))
    ctx.sleep(1)
    approval = ctx.wait_for_signal("approval", timeout=datetime.timedelta(hours=1))
    tracking = ctx.step("ship", ship, order["item"])
    return {"item": order["item"], "charge_id": charge_id, "tracking": tracking,
            "approved_by": approval["by"]}


if __name__ == "__main__":
    worker.run()
