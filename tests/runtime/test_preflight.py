"""The precision rule and preflight blockers, with faked device properties."""

import pytest

from nbutils.runtime.environment import Platform
from nbutils.runtime.preflight import Accelerator, PreflightError, choose_precision, preflight

T4 = Accelerator(0, "Tesla T4", (7, 5), 15.0)
P100 = Accelerator(0, "Tesla P100-PCIE-16GB", (6, 0), 16.0)
A100 = Accelerator(0, "NVIDIA A100-SXM4-40GB", (8, 0), 40.0)
L4 = Accelerator(0, "NVIDIA L4", (8, 9), 22.5)


@pytest.mark.parametrize(
    "accels, dtype",
    [([T4], "fp16"), ([P100], "fp16"), ([A100], "bf16"), ([L4], "bf16"), ([], "fp32"), ([T4, T4], "fp16")],
)
def test_precision_rule(accels, dtype):
    assert choose_precision(accels).dtype == dtype


def test_precision_rule_ignores_torch_bf16_claim(monkeypatch):
    # torch says yes on a T4 because it counts emulation; the rule must not ask it.
    import torch

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert choose_precision([T4]).dtype == "fp16"


def test_bf16_on_t4_is_a_clear_error():
    with pytest.raises(PreflightError, match=r"bf16 asked on Tesla T4 \(compute capability 7.5\)"):
        choose_precision([T4], "bf16")


def test_mixed_precision_on_cpu_is_an_error():
    with pytest.raises(PreflightError, match="no GPU"):
        choose_precision([], "fp16")


@pytest.mark.parametrize("flash_attn_installed", [False, True])
def test_flash_attention_only_on_native_bf16_with_flash_attn(monkeypatch, flash_attn_installed):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (object() if flash_attn_installed else None) if name == "flash_attn" else real(name, *a))
    assert choose_precision([A100]).attn_implementation == ("flash_attention_2" if flash_attn_installed else "sdpa")
    assert choose_precision([T4]).attn_implementation == "sdpa"  # no FlashAttention-2 on a T4, installed or not


def _platform(tmp_path, working=None):
    return Platform("local", "batch", tmp_path / "in", working or tmp_path / "work", tmp_path / "tmp")


def test_preflight_prints_one_table(tmp_path, capsys):
    info = preflight(platform=_platform(tmp_path), accels=[])
    text = capsys.readouterr().out
    for key in ("platform", "run_type", "gpus", "precision", "version.torch", "version.protobuf", "free_disk_gb"):
        assert key in text
    assert info.precision == "fp32" and info.gpu_count == 0 and info.gpu_capability is None
    assert info.versions["torch"] != "missing"


def test_preflight_blocks_bf16_on_t4(tmp_path):
    with pytest.raises(PreflightError, match="bf16 asked on Tesla T4"):
        preflight(precision="bf16", platform=_platform(tmp_path), accels=[T4], show=False)


def test_preflight_blocks_4bit_without_bitsandbytes(tmp_path, monkeypatch):
    import nbutils.runtime.preflight as pf

    real = pf.versions
    monkeypatch.setattr(pf, "versions", lambda: {**real(), "bitsandbytes": "missing"})
    with pytest.raises(PreflightError, match="bitsandbytes is not installed"):
        preflight(load_in_4bit=True, platform=_platform(tmp_path), accels=[], show=False)


def test_preflight_blocks_unwritable_working_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(PreflightError, match="not writable"):
        preflight(platform=_platform(tmp_path, working=blocker / "sub"), accels=[], show=False)


def test_inspect_returns_the_blockers_without_printing_or_raising(tmp_path, capsys):
    from nbutils.runtime.preflight import inspect

    env, problems = inspect("bf16", platform=_platform(tmp_path), accels=[T4])
    assert env.precision == "blocked" and len(problems) == 1 and "bf16" in problems[0]
    assert capsys.readouterr().out == ""


# What Kaggle's torch 2.x+cu128 carries: kernels from Volta up, no sm_60 (the P100's).
CU128_ARCHS = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]


@pytest.mark.parametrize("capability, archs, ok", [
    ((6, 0), CU128_ARCHS, False), ((7, 5), CU128_ARCHS, True), ((8, 9), CU128_ARCHS, True),  # L4: sm_86 cubin runs on 8.9
    ((8, 9), ["sm_90"], False),  # a cubin never runs on an older minor
    ((6, 1), ["sm_50", "sm_60"], True), ((10, 0), ["sm_90", "compute_90"], True),  # PTX compiles for newer GPUs
    ((6, 0), ["compute_70"], False), ((9, 0), ["sm_90a"], True),
    ((6, 0), [], True),  # a CPU build or no flags: nothing to judge by, no blocker
])
def test_runs_on_reads_cubins_and_ptx(capability, archs, ok):
    from nbutils.runtime.preflight import runs_on

    assert runs_on(capability, archs) is ok


@pytest.mark.parametrize("name, way_out", [("kaggle", "Settings > Accelerator > GPU T4 x2"),
                                           ("colab", "Runtime > Change runtime type > T4 GPU")])
def test_a_gpu_this_torch_has_no_kernels_for_is_a_blocker_naming_the_way_out(tmp_path, monkeypatch, name, way_out):
    """Kaggle's P100 (cc 6.0) under a cu12.8 torch: fp16 by the precision rule, but the first CUDA op would fail with
    "no kernel image is available" after the install and model download."""
    import nbutils.runtime.preflight as pf

    monkeypatch.setattr(pf, "torch_arch_list", lambda: CU128_ARCHS)
    platform = Platform(name, "interactive", tmp_path / "in", tmp_path / "work", tmp_path / "tmp")
    _, problems = pf.inspect(platform=platform, accels=[P100], load_in_4bit=False)
    assert len(problems) == 1 and problems[0].startswith("Tesla P100-PCIE-16GB (GPU 0, compute capability 6.0) has no")
    assert "sm_70" in problems[0] and "no kernel image is available" in problems[0] and way_out in problems[0]
    assert pf.inspect(platform=platform, accels=[T4, T4], load_in_4bit=False)[1] == []
    assert pf.inspect(platform=platform, accels=[P100], load_in_4bit=False, gpu=False)[1] == []  # 01: CPU work


def test_the_arch_list_is_read_without_touching_cuda(monkeypatch):
    """torch.cuda.is_available() initialises the driver (its device count) and would break accelerate's forked
    launcher: the arch flags are read from the build, and a CPU build gives none."""
    import torch

    import nbutils.runtime.preflight as pf

    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("touched CUDA"))
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch._C, "_cuda_getArchFlags", lambda: "sm_75 sm_80 compute_80", raising=False)
    assert pf.torch_arch_list() == ["sm_75", "sm_80", "compute_80"]
    monkeypatch.setattr(torch.version, "cuda", None)
    assert pf.torch_arch_list() == []


@pytest.mark.parametrize("smi_mib", ["15360", "15109"])  # a T4's memory.total, by driver
@pytest.mark.parametrize("child_ok", [True, False])
def test_a_t4s_memory_reads_as_torch_reports_it_whatever_the_driver(monkeypatch, smi_mib, child_ok):
    """The plans check a T4 at torch's 14.74 GiB (defaults.T4_MEMORY_GB): preflight's figure must not exceed it, or
    02 accepts what 01 and the dry run refuse. torch's own figure comes from a child process (this one keeps CUDA
    untouched); without it, nvidia-smi's rounded down."""
    import subprocess
    from types import SimpleNamespace

    from nbutils import defaults
    from nbutils.runtime import preflight

    def run(cmd, **kw):
        if cmd[0] == "nvidia-smi":
            return SimpleNamespace(returncode=0, stdout=f"0, Tesla T4, 7.5, {smi_mib}\n1, Tesla T4, 7.5, {smi_mib}\n")
        assert "-c" in cmd  # the child that asks torch, its GPUs in nvidia-smi's order (PCI bus, not fastest first)
        assert kw["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        return SimpleNamespace(returncode=0 if child_ok else 1, stdout="15828320256 15828320256\n" if child_ok else "")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = preflight.accelerators()
    assert [a.capability for a in found] == [(7, 5), (7, 5)]
    if child_ok or smi_mib == "15109":
        assert [a.memory_gb for a in found] == [defaults.T4_MEMORY_GB] * 2
    else:  # the older driver's 15360 MiB without torch's figure: at least never rounded up
        assert [a.memory_gb for a in found] == [15.0, 15.0]
    assert preflight.smi_memory_gb("15109") == 14.7 and preflight.smi_memory_gb("40960") == 40.0


def test_gemma_in_fp16_warns_naming_the_way_out():
    """Gemma-2/3 overflow fp16 (NaN losses): the plan warns, naming precision="fp32" on a GPU without bf16, bf16
    where the GPU has it; nothing for another model, nor for fp32/bf16."""
    from transformers import Gemma2Config, Gemma3Config, LlamaConfig

    from nbutils.runtime.preflight import fp16_warning

    t4 = fp16_warning(Gemma2Config(), "fp16", (7, 5))
    assert "gemma2" in t4 and 'precision="fp32"' in t4 and "bf16\"" not in t4
    assert 'precision="bf16"' in fp16_warning(Gemma3Config(), "fp16", (8, 0))  # its text_config says gemma3_text
    assert fp16_warning(LlamaConfig(), "fp16", (7, 5)) is None
    assert fp16_warning(Gemma2Config(), "fp32", (7, 5)) is None and fp16_warning(Gemma2Config(), "bf16", (8, 0)) is None
