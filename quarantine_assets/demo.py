"""Demo input: small order and customer files with good rows and every kind of bad one."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

ORDER_HEADER = "order_id,customer_id,amount,currency,order_ts"
CURRENCIES = ("EUR", "USD", "GBP")


@dataclass(frozen=True)
class GeneratedBatch:
    orders_file: Path
    customers_file: Path
    orders: int
    customers: int


def _order_line(rng: random.Random, order_id: int) -> str:
    amount = f"{rng.uniform(1, 500):.2f}"
    day = rng.randint(1, 28)
    line = [str(order_id), f"c{rng.randint(1, 50)}", amount, rng.choice(CURRENCIES), f"2026-11-{day:02d} 10:00:00"]
    defect = rng.random()
    if defect < 0.06:
        line[0] = ""  # NULL order_id
    elif defect < 0.12:
        line[2] = f"-{amount}"  # negative amount
    elif defect < 0.16:
        line[3] = "XXX"  # unknown currency
    elif defect < 0.19:
        line[2] = "n/a"  # does not parse: kept raw in _rescued_data
    elif defect < 0.21:
        line[3] = ""  # NULL currency: NULL fails the rule, it does not pass it
    return ",".join(line)


def _customer_line(rng: random.Random, number: int) -> str:
    customer = {
        "customer_id": f"c{number}",
        "email": f"user{number}@example.com",
        "country": rng.choice(("DE", "FR", "GB", "US")),
        "signup_date": f"2026-10-{rng.randint(1, 28):02d}",
    }
    defect = rng.random()
    if defect < 0.08:
        customer["email"] = f"user{number}.example.com"
    elif defect < 0.14:
        customer["country"] = None
    elif defect < 0.18:
        return '{"customer_id": "c%d", "email": ' % number  # truncated JSON
    return json.dumps(customer)


def generate_batch(landing: Path, batch: int, orders: int = 40, customers: int = 20) -> GeneratedBatch:
    """Write one new file per source; a seeded generator makes each batch reproducible."""
    rng = random.Random(batch)
    orders_dir, customers_dir = landing / "orders", landing / "customers"
    orders_dir.mkdir(parents=True, exist_ok=True)
    customers_dir.mkdir(parents=True, exist_ok=True)
    order_lines = [_order_line(rng, batch * 100_000 + n) for n in range(orders)]
    # The same bad row twice: a DLQ must keep both.
    order_lines += [f",c1,10.00,EUR,2026-11-0{1 + batch % 9} 10:00:00"] * 2
    orders_file = orders_dir / f"orders-{batch:04d}.csv"
    orders_file.write_text("\n".join([ORDER_HEADER, *order_lines]) + "\n")
    customer_lines = [_customer_line(rng, batch * 100_000 + n) for n in range(customers)]
    customers_file = customers_dir / f"customers-{batch:04d}.json"
    customers_file.write_text("\n".join(customer_lines) + "\n")
    return GeneratedBatch(orders_file, customers_file, len(order_lines), len(customer_lines))


def next_batch_number(landing: Path) -> int:
    return len(list((landing / "orders").glob("orders-*.csv"))) if (landing / "orders").exists() else 0
