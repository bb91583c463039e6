"""Accelerators, the precision rule and the preflight check every notebook runs near its top.

The precision rule never trusts `torch.cuda.is_bf16_supported()`: it counts emulation and says
yes on a T4 (compute capability 7.5), where bf16 is slow or broken. We read the capability.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from nbutils.runtime import output
from nbutils.runtime.environment import Platform, detect_platform
from nbutils.runtime.packages import NEEDED, PREFLIGHT_VERSIONS, acceptable


class PreflightError(RuntimeError):
    """A blocker found before any GPU time is spent; the message says what to do."""


@dataclass(frozen=True)
class Accelerator:
    index: int
    name: str
    capability: tuple[int, int]
    memory_gb: float


@dataclass(frozen=True)
class Environment:
    """What preflight found: the record the notebook's later cells read (env.precision, env.gpu_count ...)."""

    platform: str  # "kaggle" | "colab" | "local"
    run_type: str  # "interactive" | "batch"
    gpus: str  # one line per GPU, "none" on the CPU
    gpu_count: int
    precision: str  # "bf16" | "fp16" | "fp32"
    attention: str  # what this hardware prefers (flash_attention_2 or sdpa); the model class may settle for eager
    versions: dict[str, str] = field(default_factory=dict)  # package -> installed version ("missing")
    working_dir: str = ""
    free_disk_gb: float = 0.0
    gpu_capability: tuple[int, int] | None = None  # the weakest GPU's compute capability
    gpu_memory_gb: float | None = None  # the smallest GPU's memory

    def table(self) -> str:
        """The printed table: one row per fact, versions one row each."""
        width = max(len(k) for k in self.rows())
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.rows().items())

    def rows(self) -> dict:
        """One entry per fact, versions one each: the table's rows (02's plan prints them with its own)."""
        return {"platform": self.platform, "run_type": self.run_type, "gpus": self.gpus, "gpu_count": self.gpu_count,
                "precision": self.precision, "attention": self.attention,
                **{f"version.{k}": v for k, v in self.versions.items()},
                "working_dir": self.working_dir, "free_disk_gb": self.free_disk_gb}


@dataclass(frozen=True)
class Precision:
    dtype: str  # "bf16" | "fp16" | "fp32": the compute dtype
    attn_implementation: str  # "sdpa" | "flash_attention_2"
    reason: str


def accelerators() -> list[Accelerator]:
    """The visible CUDA devices (empty on a CPU machine), read without initialising CUDA in this process.

    nvidia-smi first: accelerate's notebook launcher (2xT4 on Kaggle) refuses to start once an
    earlier cell has initialised CUDA, and torch.cuda.get_device_properties does exactly that.
    """
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,compute_cap,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
        rows = [r.split(", ") for r in out.stdout.strip().splitlines()] if out.returncode == 0 else []
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if rows and all(len(r) == 4 for r in rows):
            keep = [r for r in rows if visible is None or r[0] in visible.split(",")]
            totals = torch_memory_gb(len(keep)) or [smi_memory_gb(r[3]) for r in keep]
            return [Accelerator(i, r[1], tuple(int(x) for x in r[2].split(".")), gb)
                    for i, (r, gb) in enumerate(zip(keep, totals))]
    except (OSError, subprocess.TimeoutExpired, ValueError):
        pass
    import torch

    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(Accelerator(i, p.name, (p.major, p.minor), round(p.total_memory / 2**30, 1)))
    return out


def torch_memory_gb(count: int) -> list[float] | None:
    """Each visible GPU's memory as torch reports it (total_memory, GiB to 0.1), read in a child process so that
    this one never initialises CUDA; None when the child cannot say (then nvidia-smi's figure stands in).

    The plans (defaults.T4_MEMORY_GB, 01's cap, the dry run) check a T4 at torch's 14.74 GiB; nvidia-smi's
    memory.total says 15360 MiB (15.0) or 15109 MiB (14.8) on a T4, by driver, and would let 02 accept plans 01
    refuses."""
    import subprocess
    import sys

    code = ("import torch; print(' '.join(str(torch.cuda.get_device_properties(i).total_memory) "
            "for i in range(torch.cuda.device_count())))")
    try:
        # nvidia-smi lists the GPUs in PCI bus order; torch's default is fastest first (two unlike GPUs would swap)
        env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
        totals = [int(x) for x in out.stdout.split()] if out.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return [round(t / 2**30, 1) for t in totals] if len(totals) == count else None


def smi_memory_gb(mib: str) -> float:
    """nvidia-smi's memory.total (MiB) in GiB, rounded down to 0.1: never more than torch's total_memory, which is
    below it by what the driver keeps (a T4's 15109 MiB is 14.7, as torch's 14.74 GiB; 15360 MiB still reads 15.0)."""
    return math.floor(float(mib) / 1024 * 10) / 10


def choose_precision(accels: list[Accelerator], requested: str = "auto") -> Precision:
    """bf16 only at compute capability >= 8.0; fp16 below (T4, P100); fp32 on the CPU."""
    requested = requested.lower()
    if requested not in ("auto", "bf16", "fp16", "fp32"):
        raise PreflightError(f"precision={requested!r} is not one of auto, bf16, fp16, fp32.")
    if not accels:
        if requested in ("bf16", "fp16"):
            raise PreflightError(
                f"precision={requested!r} asked but no GPU is visible: mixed precision needs a GPU. "
                "Use precision='auto' (fp32 on the CPU), or turn on a GPU accelerator."
            )
        return Precision("fp32", "sdpa", "no GPU: fp32 on the CPU")
    cap = min(a.capability for a in accels)
    name = accels[0].name
    native_bf16 = cap >= (8, 0)
    if requested == "bf16" and not native_bf16:
        raise PreflightError(
            f"bf16 asked on {name} (compute capability {cap[0]}.{cap[1]}), which has no native bf16: "
            "torch.cuda.is_bf16_supported() counts slow emulation. Use precision='fp16' or 'auto'."
        )
    dtype = requested if requested != "auto" else ("bf16" if native_bf16 else "fp16")
    attn = "flash_attention_2" if native_bf16 and importlib.util.find_spec("flash_attn") else "sdpa"
    reason = f"{name} capability {cap[0]}.{cap[1]}: " + ("native bf16" if native_bf16 else "no native bf16, fp16")
    return Precision(dtype, attn, reason)


FP16_OVERFLOWS = ("gemma2", "gemma3", "gemma3_text")  # activations past fp16's 65,504 (transformers#36822)


def fp16_warning(model_config, precision: str, capability: tuple[int, int] | None) -> str | None:
    """A warning when this model computes in fp16, which its activations overflow (Gemma-2/3: NaN losses, inf
    logits), naming the way out: bf16 where the GPU has it, else precision="fp32"; None otherwise. Only a warning:
    fp32 doubles the activations' memory, and the plan shows what that costs."""
    text = getattr(model_config, "text_config", None)
    types = {getattr(model_config, "model_type", None), getattr(text, "model_type", None)}
    kind = next((t for t in FP16_OVERFLOWS if t in types), None)
    if precision != "fp16" or kind is None:
        return None
    way_out = ("set precision=\"bf16\" (or \"auto\") in the parameters cell: this GPU has native bf16"
               if capability and capability >= (8, 0) else
               "set precision=\"fp32\" in the parameters cell (this GPU has no native bf16): slower and about twice "
               "the activations' memory (the memory rows then plan it), but it does not overflow")
    return (f"{kind} computes in fp16 here, and Gemma-2/3 activations are known to overflow fp16 (NaN loss, inf "
            f"logits). If the loss turns NaN, {way_out}")


def torch_arch_list() -> list[str]:
    """The GPU architectures this torch carries kernels for ("sm_75", PTX "compute_90"); empty on a CPU build.

    torch.cuda.get_arch_list() gives the same, but across torch releases it has asked torch.cuda.is_available()
    first, whose device count initialises the CUDA driver and poisons the forked workers of accelerate's launcher
    (see accelerators()). The flags are a string compiled into the build; no CUDA call reads them.
    """
    import torch

    if not torch.version.cuda:  # a CPU build (the flags function is absent from it)
        return []
    try:
        return (torch._C._cuda_getArchFlags() or "").split()
    except (AttributeError, RuntimeError):  # a private function: gone or failing, there is nothing to judge by
        return []


def runs_on(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """Can a GPU of this compute capability run this build? A cubin (sm_XY) runs on its major at minor Y or above;
    PTX (compute_XY) is compiled on load for XY or newer. An empty list (a CPU build, a private API gone) says yes:
    nothing to judge by."""
    def cap(entry: str) -> tuple[int, int]:
        digits = "".join(ch for ch in entry.split("_", 1)[1] if ch.isdigit())  # sm_90a, sm_100, compute_120
        return int(digits[:-1]), int(digits[-1])

    archs = [a for a in arch_list if a.startswith(("sm_", "compute_")) and any(ch.isdigit() for ch in a)]
    cubins = [cap(a) for a in archs if a.startswith("sm_")]
    ptx = [cap(a) for a in archs if a.startswith("compute_")]
    return not archs or any(c[0] == capability[0] and c <= capability for c in cubins) or any(c <= capability for c in ptx)


def kernel_problems(accels: list[Accelerator], arch_list: list[str], platform_name: str) -> list[str]:
    """One blocker per GPU this torch has no kernels for (Kaggle's P100, cc 6.0, under a torch built from sm_70 up):
    its first CUDA operation would fail with "no kernel image is available for execution on the device"."""
    way_out = {"kaggle": "Choose Settings > Accelerator > GPU T4 x2, then run the notebook again",
               "colab": "Choose Runtime > Change runtime type > T4 GPU, then run the notebook again"}.get(
        platform_name, "Run on a GPU this torch supports, or install a torch built for this one")
    built = ", ".join(a for a in arch_list if a.startswith("sm_"))
    return [f"{a.name} (GPU {a.index}, compute capability {a.capability[0]}.{a.capability[1]}) has no kernels in "
            f"this torch (built for {built or ', '.join(arch_list)}): its first CUDA operation would fail with \"no kernel "
            f"image is available\". {way_out}."
            for a in accels if not runs_on(a.capability, arch_list)]


def versions() -> dict[str, str]:
    """Installed versions of the packages the notebooks rely on ('missing' when absent)."""
    out = {}
    for pkg in PREFLIGHT_VERSIONS:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "missing"
    return out


def version_problems(installed: dict[str, str]) -> list[str]:
    """The installed packages install would replace (nbutils.runtime.packages.acceptable): one message each."""
    out = []
    for pkg, have in installed.items():
        if pkg in NEEDED and have != "missing" and not acceptable(pkg, have):
            need = NEEDED[pkg]
            wanted = f"exactly {need.pin}" if need.exact else f"at least {need.minimum}"
            out.append(f"{pkg} {have} is installed but these notebooks need {wanted}: run the install cell, then restart.")
    return out


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            return True
    except OSError:
        return False


def inspect(precision: str = "auto", load_in_4bit: bool = True, platform: Platform | None = None,
            accels: list[Accelerator] | None = None, gpu: bool = True) -> tuple[Environment, list[str]]:
    """What preflight finds, and its blockers (one message each), without printing or raising: 02's plan
    prints them in its own table. gpu=False: the notebook computes on the CPU (01), so a GPU this torch cannot
    run on blocks nothing there."""
    platform = platform or detect_platform()
    output.quiet_session(platform.is_batch)  # before transformers, peft and bitsandbytes load: see output.py
    accels = accelerators() if accels is None else accels
    vers = versions()
    problems = []
    try:
        chosen = choose_precision(accels, precision)
    except PreflightError as e:
        problems.append(str(e))
        chosen = None
    problems += kernel_problems(accels, torch_arch_list() if accels and gpu else [], platform.name)
    if load_in_4bit and vers["bitsandbytes"] == "missing":
        problems.append("load_in_4bit=True but bitsandbytes is not installed: run the install cell "
                        "(pip install bitsandbytes) or set load_in_4bit=False.")
    problems += version_problems(vers)
    if not _writable(platform.working_root):
        problems.append(f"working dir {platform.working_root} is not writable: nothing could be saved. "
                        "Set NBUTILS_WORKING_ROOT to a writable folder.")
    free_gb = shutil.disk_usage(platform.working_root).free / 2**30 if platform.working_root.exists() else 0.0
    gpus = "; ".join(f"{a.name} cc{a.capability[0]}.{a.capability[1]} {a.memory_gb} GB" for a in accels) or "none"
    env = Environment(platform.name, platform.run_type, gpus, len(accels), chosen.dtype if chosen else "blocked",
                      chosen.attn_implementation if chosen else "-", vers, str(platform.working_root),
                      round(free_gb, 1), min(a.capability for a in accels) if accels else None,
                      min(a.memory_gb for a in accels) if accels else None)
    return env, problems


def preflight(precision: str = "auto", load_in_4bit: bool = True, platform: Platform | None = None,
              accels: list[Accelerator] | None = None, show: bool = True, gpu: bool = True) -> Environment:
    """Print one table of where/what we run on; raise PreflightError for blockers (gpu: see inspect)."""
    env, problems = inspect(precision, load_in_4bit, platform, accels, gpu)
    if show and int(os.environ.get("RANK", "0")) == 0:  # one table, not one per process
        print(env.table())
    if problems:
        raise PreflightError("Preflight found blockers:\n- " + "\n- ".join(problems))
    return env
