"""Where things live by default. Both the config loader and the engine read these, so they agree."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_config_dir() -> Path:
    return Path(os.environ.get("QUARANTINE_CONFIG_DIR") or REPO_ROOT / "configs")


def default_env() -> str:
    return os.environ.get("QUARANTINE_ENV") or "dev"


STORAGE_OPTIONS_VARIABLE = "QUARANTINE_STORAGE_OPTIONS"
# Which Spark every step and command runs on: a Spark Connect URL (`sc://host:port`, a cluster's endpoint
# or `spark-server`), `local` (the default: a local server started on first use and kept warm), or
# `embedded` (a JVM in this process, as the engine's own tests use).
SPARK_REMOTE_VARIABLE = "QUARANTINE_SPARK_REMOTE"


def default_warehouse() -> str:
    """A folder, or an object-store URL such as `s3://bucket/warehouse`."""
    return os.environ.get("QUARANTINE_WAREHOUSE") or str(REPO_ROOT / "warehouse")
