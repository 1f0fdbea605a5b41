"""Where things live by default. Both the config loader and the engine read these, so they agree."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_config_dir() -> Path:
    return Path(os.environ.get("QUARANTINE_CONFIG_DIR") or REPO_ROOT / "configs")


def default_env() -> str:
    return os.environ.get("QUARANTINE_ENV") or "dev"


def default_warehouse() -> Path:
    return Path(os.environ.get("QUARANTINE_WAREHOUSE") or REPO_ROOT / "warehouse")
