"""Small Lakehouse Plumber projects for config tests: one valid flowgroup, overridden where a test wants one
thing wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ABSENT = object()  # an override that removes the key
RULES = {"order_id IS NOT NULL": {"action": "drop", "name": "valid_order_id"}}
TOKENS = {"dev": {"catalog": "main", "ops_schema": "ops", "bronze_schema": "bronze"}}


def flowgroup(table: str = "orders", name: str | None = None, **dq_overrides: Any) -> dict[str, Any]:
    """load -> data_quality (quarantine) -> write, valid unless overridden."""
    dq = {
        "name": name or f"dq_{table}",
        "type": "transform",
        "transform_type": "data_quality",
        "source": f"v_{table}_raw",
        "target": f"v_{table}_validated",
        "expectations_file": "expectations/rules.yaml",
        "mode": "quarantine",
        "readMode": "stream",
        "quarantine": {
            "dlq_table": "${catalog}.${ops_schema}.dlq",
            "source_table": f"${{catalog}}.${{bronze_schema}}.{table}",
        },
    }
    dq = {key: value for key, value in {**dq, **dq_overrides}.items() if value is not ABSENT}
    return {
        "pipeline": "demo",
        "flowgroup": table,
        "actions": [
            {
                "name": f"load_{table}",
                "type": "load",
                "source": {"type": "cloudfiles", "path": f"${{warehouse}}/_landing/{table}", "format": "json"},
                "target": f"v_{table}_raw",
            },
            dq,
            {
                "name": f"write_{table}",
                "type": "write",
                "source": f"v_{table}_validated",
                "write_target": {
                    "type": "streaming_table",
                    "catalog": "${catalog}",
                    "schema": "${bronze_schema}",
                    "table": table,
                },
            },
        ],
    }


def project_dir(root: Path, flowgroups: dict[str, Any], rules: Any = RULES) -> Path:
    """Flowgroups by file name (a dict is dumped as YAML, a str written as is), one rules file, dev tokens."""
    files = {f"pipelines/{name}": content for name, content in flowgroups.items()}
    files |= {"expectations/rules.yaml": rules, "substitutions/dev.yaml": TOKENS}
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
    return root
