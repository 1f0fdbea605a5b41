"""What the files of a Delta table hold on disk, read without Spark: what an erasure must leave nowhere."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import VariantVal


def row_numbers_in_files(folder: Path) -> set[int]:
    """Every row number any data or change-data file under `folder` still holds, current or not, with the
    payloads decoded from their files as they are on disk."""
    found = set()
    for file in folder.rglob("*.parquet"):
        if "_delta_log" in file.parts:
            continue
        for payload in pq.read_table(file, columns=["_row_data"]).column("_row_data").to_pylist():
            found.add(VariantVal(payload["value"], payload["metadata"]).toPython()["row_no"])
    return found


def files_holding_text(folder: Path, text: str) -> list[str]:
    """Every file under `folder`, the log and its checkpoints included, that holds `text`, in its bytes or in
    its parquet values."""
    holding = []
    for file in (path for path in folder.rglob("*") if path.is_file()):
        shown = (
            repr(pq.read_table(file).to_pylist()) if file.suffix == ".parquet" else file.read_bytes().decode("latin-1")
        )
        if text in shown:
            holding.append(str(file.relative_to(folder)))
    return holding
