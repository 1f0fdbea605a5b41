"""One SparkSession for the whole test session: a JVM start costs 15-30 s."""

from __future__ import annotations

from pathlib import Path

import pytest

from quarantine_assets.engine.session import build_spark_session
from quarantine_assets.engine.tables import Warehouse


@pytest.fixture(scope="session")
def spark():
    session = build_spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "warehouse")
