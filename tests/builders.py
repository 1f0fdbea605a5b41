"""Small typed actions for engine tests, without going through YAML."""

from __future__ import annotations

from pathlib import Path

from quarantine_assets.config.models import DataQualityAction, DeltaSource, QuarantineSpec, Rule

ORDERS_SCHEMA = "row_no INT, order_id INT, amount DOUBLE, currency STRING"
ORDER_RULES = (
    Rule(name="valid_order_id", expression="order_id IS NOT NULL"),
    Rule(name="non_negative_amount", expression="amount >= 0", message="an order amount is never negative"),
    Rule(name="known_currency", expression="currency IN ('EUR', 'USD')"),
)


def orders_action(
    name: str = "dq_orders",
    source_table: str = "demo.bronze.orders",
    inbox_table: str = "demo.ops.dlq",
    mode: str = "quarantine",
    rules: tuple[Rule, ...] = ORDER_RULES,
) -> DataQualityAction:
    return DataQualityAction(
        pipeline="demo",
        flowgroup="orders",
        name=name,
        config_file=Path("pipelines/demo/orders.yaml"),
        source=DeltaSource(table=f"demo.raw.{name}"),
        target_table=f"demo.bronze.{name}_validated",
        expectations_file=Path("expectations/orders.yaml"),
        rules=rules,
        mode=mode,
        quarantine=QuarantineSpec(inbox_table=inbox_table, source_table=source_table) if mode == "quarantine" else None,
        config_version="test",
    )
