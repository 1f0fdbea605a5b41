"""Errors named after what went wrong. Each carries a stable code so operators can grep and alert on it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input, located as precisely as we can."""

    code: str
    message: str
    file: Path | None = None
    field: str | None = None
    severity: str = "error"  # "error" or "warning"

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = f" [{self.file}" + (f": {self.field}" if self.field else "") + "]"
        elif self.field:
            where = f" [{self.field}]"
        return f"{self.code} {self.severity}: {self.message}{where}"


class QuarantineError(Exception):
    """Base of every error this project raises on purpose; always carries a code."""

    def __init__(self, code: str, message: str, *, file: Path | None = None, field: str | None = None):
        self.problem = Problem(code=code, message=message, file=file, field=field)
        super().__init__(str(self.problem))

    @property
    def code(self) -> str:
        return self.problem.code


class ConfigError(QuarantineError):
    """The pipeline configuration is invalid; holds every problem found, not just the first."""

    def __init__(self, problems: list[Problem]):
        self.problems = [p for p in problems if p.severity == "error"]
        first = self.problems[0]
        super().__init__(first.code, first.message, file=first.file, field=first.field)
        self.args = ("\n".join(str(p) for p in self.problems),)


class MissingTableError(QuarantineError):
    """A DLQ table the pipeline needs does not exist; nothing has been written."""


class UnhealthyTableError(QuarantineError):
    """A DLQ table exists but is set up so that rows would be lost; nothing has been written."""


class OwnershipError(QuarantineError):
    """Another action owns the DLQ slice; nothing has been written."""


class OperatorError(QuarantineError):
    """An operator command was refused; nothing has been changed."""


class DataQualityFailure(QuarantineError):
    """A `fail` rule was violated in dqe mode; the batch was not written."""
