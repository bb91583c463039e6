"""Where we run and where files go: Kaggle (interactive or batch), Colab or local.

Every notebook finds its inputs and writes its outputs through these helpers, so the same code
works on Kaggle (/kaggle/input, /kaggle/working), on Colab (/content) and locally (runs/), and
the harness can simulate Kaggle locally by pointing the roots elsewhere with environment variables:
NBUTILS_INPUT_ROOT, NBUTILS_WORKING_ROOT, NBUTILS_TEMP_ROOT.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from nbutils.chain import MARKERS
from nbutils.defaults import is_auto

KAGGLE_ROOTS = ("/kaggle/input", "/kaggle/working", "/kaggle/temp")
COLAB_ROOTS = ("/content", "/content", "/tmp")
# Each Colab notebook runs in a runtime of its own, whose /content goes with it: with Google Drive mounted (Files pane >
# Mount Drive) every notebook writes under this folder instead, so the next one, in another runtime, finds its output
# there, and 02 resumes from its checkpoints in a new runtime.
COLAB_DRIVE = Path("/content/drive/MyDrive")
COLAB_DRIVE_FOLDER = "qlora-notebooks"


@dataclass(frozen=True)
class Platform:
    name: str  # "kaggle" | "colab" | "local"
    run_type: str  # "interactive" | "batch"
    input_root: Path
    working_root: Path
    temp_root: Path

    @property
    def is_batch(self) -> bool:
        return self.run_type == "batch"


def _repo_root() -> Path | None:
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").exists() and (here / "notebooks").is_dir() else None


def detect_platform(env: dict | None = None) -> Platform:
    """Name the platform and its input/working/temp roots (environment variables win)."""
    env = os.environ if env is None else env
    run_type_raw = env.get("KAGGLE_KERNEL_RUN_TYPE", "")
    if run_type_raw or env.get("KAGGLE_URL_BASE") or env.get("KAGGLE_DATA_PROXY_TOKEN"):
        name, roots = "kaggle", KAGGLE_ROOTS
        run_type = "batch" if run_type_raw.lower() == "batch" else "interactive"
    elif env.get("COLAB_RELEASE_TAG") or "google.colab" in sys.modules:
        name, roots, run_type = "colab", COLAB_ROOTS, "interactive"
        if COLAB_DRIVE.is_dir():
            roots = (roots[0], str(COLAB_DRIVE / COLAB_DRIVE_FOLDER), roots[2])
    else:
        base = _repo_root() or Path.cwd()
        name, run_type = "local", "batch" if env.get("PAPERMILL_EXECUTION") else "interactive"
        roots = (str(base / "runs" / "input"), str(base / "runs"), str(base / "runs" / "tmp"))
    return Platform(
        name=name,
        run_type=run_type,
        input_root=Path(env.get("NBUTILS_INPUT_ROOT") or roots[0]),
        working_root=Path(env.get("NBUTILS_WORKING_ROOT") or roots[1]),
        temp_root=Path(env.get("NBUTILS_TEMP_ROOT") or roots[2]),
    )


def _given(path) -> bool:
    """A folder given by the user, not "auto" (the notebooks' default: find it) nor empty."""
    return path is not None and str(path).strip() != "" and not is_auto(str(path))


def stage_dir(stage: str, output_dir: str | os.PathLike = "auto", platform: Platform | None = None) -> Path:
    """The folder a notebook writes to: `output_dir` if given, else ("auto") <working_root>/<stage>."""
    platform = platform or detect_platform()
    path = Path(output_dir) if _given(output_dir) else platform.working_root / stage
    path.mkdir(parents=True, exist_ok=True)
    return path


def find_upstream(stage: str, given: str | os.PathLike = "auto", platform: Platform | None = None) -> Path:
    """Locate an upstream notebook's output folder: `given` if set, else ("auto") search working then input roots."""
    # The stage's folder is looked for in the working root first (same session or local chain), then among
    # attached inputs (Kaggle mounts an upstream notebook's output under /kaggle/input/<slug>/).
    marker = MARKERS[stage]
    if _given(given):
        path = Path(given)
        if not (path / marker).exists():
            raise FileNotFoundError(
                f"{path} has no {marker}: it is not the output of the '{stage}' notebook. "
                f"Run that notebook first, or pass its output folder."
            )
        return path
    platform = platform or detect_platform()
    candidates = [platform.working_root / stage]
    if platform.input_root.is_dir():
        # Kaggle mounts upstream outputs a level or two below /kaggle/input; look there, shallowly.
        for depth in ("*", "*/*", "*/*/*"):
            candidates += sorted(platform.input_root.glob(f"{depth}/{stage}"))
    for path in candidates:
        if (path / marker).exists():
            return path
    looked = ", ".join(str(p) for p in candidates[:4])
    where = (f"on Colab each notebook has a runtime of its own: mount Google Drive (Files pane > Mount Drive) in every "
             f"notebook, the '{stage}' one too, so each writes to and reads from {COLAB_DRIVE / COLAB_DRIVE_FOLDER}"
             if platform.name == "colab" else "on Kaggle add its output with 'Add Input'")
    raise FileNotFoundError(
        f"No output of the '{stage}' notebook found (looked for {marker} in {looked}). "
        f"Run the '{stage}' notebook first; {where}."
    )


def process_start_time() -> float:
    """When this Python process (the notebook's kernel) started, as a Unix time."""
    try:
        import psutil

        return psutil.Process(os.getpid()).create_time()
    except Exception:  # noqa: BLE001 -- psutil is optional: read /proc instead
        with open("/proc/self/stat") as f:  # field 22: start time in clock ticks after boot
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
