"""The JVM boundary is a package boundary: `engine.lake` (delta-rs) never reaches `engine.spark` or pyspark,
and the Dagster sensors and table checks, which run in the daemon and the webserver, start no JVM."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import quarantine_assets

PACKAGE = Path(quarantine_assets.__file__).parent
LAKE = PACKAGE / "engine" / "lake"
JVM_FREE = sorted(
    [f"quarantine_assets.engine.lake.{path.stem}" for path in LAKE.glob("*.py") if path.stem != "__init__"]
    + ["quarantine_assets.defs.sensors", "quarantine_assets.defs.table_checks"]
)


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", sorted(LAKE.glob("*.py")), ids=lambda path: path.name)
def test_no_lake_module_imports_the_spark_side(path):
    spark_side = {
        module
        for module in imported_modules(path)
        if module.startswith(("pyspark", "py4j", "delta.", "quarantine_assets.engine.spark")) or module == "delta"
    }
    assert not spark_side, f"{path.name} imports {sorted(spark_side)}"


@pytest.mark.parametrize("module", JVM_FREE)
def test_a_jvm_free_module_loads_without_pyspark(module):
    """In a fresh interpreter, so that nothing another test imported hides an import."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('pyspark')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]", f"{module} loads {loaded.stdout.strip()}"
