"""One problem the harness found: its check id, where (notebook, cell, line), what happens, and the fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Problem:
    check: str
    notebook: str
    cell: int | None
    what: str
    fix: str
    allowed: bool = False
    line: int | None = None  # 1-based line within the cell
    condition: str | None = None  # the line runs only when this holds, and the lint cannot tell whether it does
    happens_if: str | None = None  # what it says happens only when this holds, and no file the lint reads can tell

    def __str__(self) -> str:
        where = f" cell {self.cell}" if self.cell is not None else ""
        where += f" line {self.line}" if self.line is not None and self.cell is not None else ""
        where += f" [conditional: runs only if {self.condition}]" if self.condition else ""
        where += f" [conditional: happens only if {self.happens_if}]" if self.happens_if else ""
        tag = " [allowed]" if self.allowed else ""
        return f"{self.check} {self.notebook}{where}: {self.what} -- {self.fix}{tag}"
