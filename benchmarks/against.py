"""One benchmark of this checkout and of an earlier commit, run in turns on this machine: a change's before and after.

    .venv/bin/python benchmarks/against.py 9296db8 --rounds 2 -- split.py throughput --rows 1000000

Each round runs the benchmark on the earlier commit's code (a git worktree of it, imported ahead of this
checkout, with this checkout's virtualenv), then on this checkout's. Taking turns spreads the machine's
drift over both. The earlier code's results are copied beside this checkout's, named
`<benchmark>-at-<commit>-<time>.json`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from harness import RESULTS

REPO = Path(__file__).resolve().parent.parent


def _run(code: Path, benchmark: list[str]) -> set[Path]:
    """Runs the benchmark with `code`'s package and scripts; returns the results it wrote."""
    results = code / "benchmarks" / "results"
    before = set(results.glob("*.json"))
    env = os.environ | {"PYTHONPATH": str(code)}
    subprocess.run(
        [sys.executable, str(code / "benchmarks" / benchmark[0]), *benchmark[1:]], cwd=code, env=env, check=True
    )
    return set(results.glob("*.json")) - before


def main(
    commit: Annotated[str, typer.Argument(help="The earlier commit.")],
    benchmark: Annotated[list[str], typer.Argument(help="The script under benchmarks/ and its arguments.")],
    rounds: Annotated[int, typer.Option(help="Turns of each.")] = 2,
) -> None:
    revision = subprocess.run(
        ["git", "rev-parse", "--short", commit], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    earlier = Path(tempfile.mkdtemp(prefix=f"bench-at-{revision}-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(earlier), revision], cwd=REPO, check=True)
    try:
        for _ in range(rounds):
            for written in _run(earlier, benchmark):
                kind, _, stamp = written.stem.rpartition("-")
                copied = RESULTS / f"{kind}-at-{revision}-{stamp}.json"
                shutil.copy(written, copied)
                typer.echo(f"{revision}: {copied}")
            for written in _run(REPO, benchmark):
                typer.echo(f"this checkout: {written}")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(earlier)], cwd=REPO, check=True)


if __name__ == "__main__":
    typer.run(main)
