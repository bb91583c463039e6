"""A chain's install step in a Kaggle image twin, run in full once: the later notebooks start where it ended.

On Kaggle every notebook of the chain starts from a fresh image and runs the same install cell, which leaves the
image in the same state each time (the same wheels from the same attached dataset, offline, pinned). The twin
runs the first notebook in a pristine copy, every check on its install included (the kernel's startup hook:
stale modules, fresh imports, `pip check`); right after its install cell succeeds, that hook takes a hard-linked
snapshot of the copy (`SNAPSHOT_VAR`, sandbox.STARTUP). A later notebook whose cells before its parameters are
the same code, with the same internet setting, starts from a copy of that snapshot instead: its install cell
finds everything in place, as a second run of the cell in one session does, and the later notebooks skip the
install's time. A notebook whose setup differs still gets a pristine copy.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

SNAPSHOT_VAR = "NBUTILS_INSTALL_SNAPSHOT"  # "<sha256 of the install cell's source>:<snapshot folder>"


def setup_cells(nb) -> tuple[str, ...]:
    """The code cells before the parameters cell (the install cell): what a notebook runs before its own work."""
    out = []
    for cell in nb.cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            break
        if cell.cell_type == "code":
            out.append(cell.source)
    return tuple(out)


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


@dataclass
class SharedInstall:
    """One chain's shared install: the first notebook's setup and internet setting, and where its snapshot lands."""

    key: tuple = ()  # (internet, *setup cells) of the first notebook with any setup
    folder: Path | None = None  # the snapshot, once its install cell has run
    origin: Path | None = None  # the copy it is taken of: the snapshot's scripts name that interpreter

    def usable(self, key: tuple) -> bool:
        return self.folder is not None and self.folder.is_dir() and key == self.key

    def take_snapshot(self, key: tuple, env_copy: Path, box_root: Path) -> dict:
        """The first notebook with setup cells: the environment variable that makes its kernel take the snapshot."""
        self.key, self.origin, self.folder = key, env_copy, box_root / "installed"
        return {SNAPSHOT_VAR: f"{digest(key[-1])}:{self.folder}"}

    def copy(self, dest: Path, fix_scripts) -> Path:
        """dest as a hard-linked copy of the snapshot (`fix_scripts(dest, origin)` repoints its scripts); its python."""
        subprocess.run(["cp", "-al", str(self.folder), str(dest)], check=True)
        fix_scripts(dest, self.origin)
        return dest / "bin" / "python"
