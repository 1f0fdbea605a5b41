"""The columns a DLQ really has. The reference's seven inbox columns are enough: every writer adapts to what
is there, and says what is lost without the context columns it would otherwise write."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from quarantine_assets.commands import UPGRADE_TABLES_COMMAND
from quarantine_assets.engine.lake.dlq_schema import ATTEMPT, INBOX_CONTEXT_LOSSES, LANDING_STAMP, OUTBOX_CONTEXT_LOSSES

V = TypeVar("V")


@dataclass(frozen=True)
class DlqColumns:
    inbox: frozenset[str]
    outbox: frozenset[str]

    @property
    def counts_attempts(self) -> bool:
        """Without attempts on both tables a row is only ever on its first attempt, and never exhausted."""
        return ATTEMPT in self.inbox and ATTEMPT in self.outbox

    @property
    def stamps_landings(self) -> bool:
        """With the stamp, a row lands once even across a reset checkpoint; without it, once per checkpoint."""
        return all(column in self.inbox for column in LANDING_STAMP)

    def inbox_values(self, values: dict[str, V]) -> dict[str, V]:
        """The assignments of an inbox update (columns or SQL text) that the inbox has columns for."""
        return {column: value for column, value in values.items() if column in self.inbox}

    def warnings(self, inbox_table: str, outbox_table: str) -> list[str]:
        """One sentence per missing context column: which, where, what is lost, and the fix."""
        missing = [
            (inbox_table, column, loss) for column, loss in INBOX_CONTEXT_LOSSES.items() if column not in self.inbox
        ]
        missing += [
            (outbox_table, column, loss) for column, loss in OUTBOX_CONTEXT_LOSSES.items() if column not in self.outbox
        ]
        return [
            f"{table} has no {column}: {loss}. Add it in place with: {UPGRADE_TABLES_COMMAND}"
            for table, column, loss in missing
        ]
