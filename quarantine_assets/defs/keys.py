"""Asset keys: one name per concept across code, docs and UI."""

from dagster import AssetKey

from quarantine_assets.config.models import DataQualityAction

VALIDATED = "validated"
INBOX = "inbox"
OUTBOX = "outbox"
RECYCLED = "recycled"


def asset_key(action: DataQualityAction, role: str) -> AssetKey:
    return AssetKey([action.key, role])
