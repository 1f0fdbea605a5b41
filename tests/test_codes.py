"""Every code has one meaning, and the README's table of codes says exactly what the registry says."""

from __future__ import annotations

import re

from quarantine_assets.codes import REGISTRY
from quarantine_assets.settings import REPO_ROOT

CODE = re.compile(r"^QA-(CFG|TBL|DQ|OPS|OWN|RUN|SRC)-\d{3}$")


def codes_table() -> str:
    rows = [f"| `{code}` | {meaning} |" for code, meaning in sorted(REGISTRY.items())]
    return "\n".join(["| code | meaning |", "| --- | --- |", *rows])


def test_every_code_is_well_formed_and_means_one_thing():
    assert all(CODE.match(code) for code in REGISTRY)
    assert len(set(REGISTRY.values())) == len(REGISTRY)


def test_readme_lists_every_code_with_its_registered_meaning():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert codes_table() in readme, "README's table of codes differs from quarantine_assets/codes.py:\n" + codes_table()
