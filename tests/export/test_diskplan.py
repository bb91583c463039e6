"""The disk plan: what is kept in the output in the order of value, what goes to the temp folder and why, sizes
from the checkpoint, and writes that never leave a half-written file under the final name."""

import pytest

from nbutils.export import diskplan

GIB = diskplan.GIB


def _plan(sizes, out_room, temp_room, shared=False, temp_extra=0, temp_only=()):
    plan = diskplan.DiskPlan(diskplan.Path("/out"), diskplan.Path("/tmp-x"),
                             {n: diskplan.Item(n, int(s * GIB)) for n, s in sizes.items()}, int(out_room * GIB),
                             int(temp_room * GIB), shared, int(temp_extra * GIB), temp_only)
    return diskplan.decide(plan, "limit")


def test_an_8b_model_on_kaggle_keeps_adapter_and_gguf_and_leaves_the_merged_model_in_temp():
    plan = _plan({"adapter": 0.2, "adapter_gguf": 0.1, "gguf": 8.5, "merged": 16.0}, out_room=20, temp_room=60)
    assert [plan.items[n].where for n in diskplan.ORDER] == ["output", "output", "output", "temp"]
    assert "16.00 GiB does not fit in the 11.20 GiB left" in plan.items["merged"].reason
    assert plan.path("merged") == diskplan.Path("/tmp-x/merged") and plan.path("gguf") == diskplan.Path("/out/gguf")


def test_with_room_for_everything_everything_is_kept():
    plan = _plan({"adapter": 0.2, "gguf": 8.5, "merged": 16.0}, out_room=100, temp_room=30)
    assert all(i.where == "output" for i in plan.items.values())


def test_one_small_disk_for_both_cannot_hold_merged_and_gguf_at_once_so_no_gguf():
    plan = _plan({"adapter": 0.2, "gguf": 8.5, "merged": 16.0}, out_room=20, temp_room=20, shared=True)
    assert plan.items["gguf"].where == "none" and plan.items["merged"].where == "output"
    assert "converting needs the merged model and the GGUF on disk at once (24.50 GiB)" in plan.items["gguf"].reason


def test_a_k_quant_needs_room_for_its_f16_intermediate_in_temp():
    sizes = {"gguf": 4.6, "merged": 16.0}
    assert _plan(sizes, out_room=20, temp_room=25, temp_extra=0).items["gguf"].where == "output"
    assert _plan(sizes, out_room=20, temp_room=25, temp_extra=15).items["gguf"].where == "none"


def test_merged_wanted_only_for_the_gguf_stays_in_temp():
    plan = _plan({"gguf": 1, "merged": 2}, out_room=100, temp_room=100, temp_only=("merged",))
    assert plan.items["merged"].where == "temp" and "export_merged=False" in plan.items["merged"].reason


def test_no_room_anywhere_writes_nothing_and_says_so():
    plan = _plan({"adapter": 1, "gguf": 8.5, "merged": 16.0}, out_room=0.5, temp_room=10)
    assert plan.items["adapter"].where == "temp"
    assert plan.items["merged"].where == "none" and plan.items["gguf"].where == "none"
    assert "nor in the temp folder" in plan.items["merged"].reason
    assert diskplan.text(plan).count("not written") == 2


def test_gguf_sizes_follow_llama_cpps_table():
    params = int(8.03e9)
    assert round(diskplan.gguf_bytes(params, "q8_0") / GIB, 2) == 7.96
    assert round(diskplan.gguf_bytes(params, "Q4_K_M") / GIB, 2) == 4.58
    assert diskplan.gguf_bytes(params, "f16") == params * 2


def test_export_sizes_from_a_checkpoint(trained_adapter):
    sizes, extra = diskplan.export_sizes(trained_adapter, 10**6, True, True, "q4_k_m", True)
    assert list(sizes) == ["adapter", "adapter_gguf", "gguf", "merged"]
    assert sizes["merged"] > 2 * 10**6 and extra > 2 * 10**6  # fp16 weights + tokenizer; the f16 intermediate
    weights = (trained_adapter / "adapter_model.safetensors").stat().st_size
    assert sizes["adapter"] > weights and sizes["adapter_gguf"] == weights // 2
    sizes, extra = diskplan.export_sizes(trained_adapter, 10**6, True, False, "", False)
    assert list(sizes) == ["adapter"] and extra == 0


def test_make_plan_reads_the_disks(tmp_path):
    plan = diskplan.make_plan(tmp_path / "out", tmp_path / "temp", {"adapter": 10, "merged": 10**18})
    assert plan.shared and plan.items["adapter"].where == "output" and plan.items["merged"].where == "none"
    summary = diskplan.summary(plan)
    assert summary["artifacts"]["merged"]["path"] is None and summary["artifacts"]["merged"]["why"]


def test_tiny_sizes_read_in_mb_not_as_zero_gib(tmp_path):
    plan = _plan({"adapter": 0.004, "merged": 0.006}, out_room=0.005, temp_room=0.001)
    assert plan.items["merged"].reason.startswith("6.1 MB does not fit in the 1.0 MB left in the output")
    assert "0.00 GiB" not in diskplan.text(plan)


def test_move_into_another_folder(tmp_path):
    src = tmp_path / "work" / "model.gguf"
    src.parent.mkdir()
    src.write_bytes(b"GGUF")
    dest = diskplan.move_into(src, tmp_path / "out")
    assert dest.read_bytes() == b"GGUF" and not src.exists() and not list((tmp_path / "out").glob("*.partial"))


def test_an_unknown_gguf_type_is_refused_before_any_merge_or_build(tmp_path):
    with pytest.raises(ValueError, match=r"gguf_type='q4' is not a GGUF type 04 writes: one of f32, f16, bf16, q8_0"):
        diskplan.export_sizes(tmp_path, 10**6, True, True, "q4", True)
    assert "gguf" in diskplan.export_sizes(tmp_path, 10**6, True, True, "Q4_K_M", True)[0]  # llama-quantize's spelling


def test_a_rerun_on_kaggle_does_not_count_the_earlier_exports_artifacts_against_the_limit(tmp_path, monkeypatch):
    """The earlier run's merged/ is replaced (or removed at the end): counted as kept, it pushed this run's merged
    model to the temp folder, gone with the session."""
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    monkeypatch.setenv("NBUTILS_WORKING_ROOT", str(tmp_path / "working"))
    monkeypatch.setenv("NBUTILS_TEMP_ROOT", str(tmp_path / "temp"))
    monkeypatch.setattr(diskplan, "KAGGLE_OUTPUT_LIMIT", 100 * 2**20)
    ckpt, out = tmp_path / "ckpt", tmp_path / "working" / "export"
    ckpt.mkdir()
    (ckpt / "adapter_model.safetensors").write_bytes(b"x" * 1000)
    (out / "merged").mkdir(parents=True)
    with open(out / "merged" / "model.safetensors", "wb") as f:  # the earlier export's merged model, 60 MiB
        f.truncate(60 * 2**20)
    plan = diskplan.for_export(out, ckpt, 20 * 10**6, True, True, "q8_0", False)  # merged 40 MB, q8_0 21 MB
    assert plan.items["merged"].where == "output" and plan.items["gguf"].where == "output"


def test_on_one_disk_kaggles_limit_holds_the_output_alone_not_the_temp_files():
    """/kaggle/working and /kaggle/temp on one 60 GiB disk: the 20 GiB that stays is the output's; temp files only
    need the disk's free space. Judged by the smaller of the two, the 8B merge took the output and the GGUF none."""
    plan = _plan({"adapter": 0.2, "adapter_gguf": 0.1, "gguf": 8.5, "merged": 16.0}, out_room=20, temp_room=60,
                 shared=True)
    assert [plan.items[n].where for n in diskplan.ORDER] == ["output", "output", "output", "temp"]


def _fake_disk(monkeypatch, root, size=256 * 2**20):
    """One disk of `size` bytes holding everything under `root`: its free space is what the files there leave."""
    from types import SimpleNamespace

    monkeypatch.setattr(diskplan.shutil, "disk_usage", lambda p: SimpleNamespace(free=size - diskplan.folder_bytes(root)))


def _write(path, n):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * n)


def test_what_killed_runs_left_in_the_temp_folder_is_removed_before_the_plan_measures_it(tmp_path, monkeypatch,
                                                                                         capsys):
    """A kernel killed mid-merge or mid-conversion leaves a merged folder's temporary name, the converter's .partial,
    an f16, base or model GGUF and llama.cpp's logit files in the temp folder (16 GiB and more for an 8B model). The
    rerun's plan measures the temp folder with them gone (the free space a first run had), says what it removed,
    and leaves what is not the suite's: a user's file, the unpacked converter, another output folder's work area."""
    monkeypatch.setenv("NBUTILS_WORKING_ROOT", str(tmp_path / "working"))
    monkeypatch.setenv("NBUTILS_TEMP_ROOT", str(tmp_path / "temp"))
    _fake_disk(monkeypatch, tmp_path)
    ckpt, out = tmp_path / "ckpt", tmp_path / "working" / "export"
    _write(ckpt / "adapter_model.safetensors", 1000)
    area = diskplan.work_area(tmp_path / "temp", out)
    other = diskplan.work_area(tmp_path / "temp", tmp_path / "working" / "other")  # a second notebook's, on one /tmp
    kept = [area / "notes.txt", area / "llama.cpp-0.3.16" / "convert_hf_to_gguf.py", other / "merged.tmp-99-abcd0123" / "m"]
    for path in kept:
        _write(path, 100)
    first = diskplan.for_export(out, ckpt, 20 * 10**6, True, True, "q8_0", False)  # merged 40 MB, q8_0 21 MB
    assert first.temp == area and area.parent == tmp_path / "temp" / "export" and area != other
    assert first.items["merged"].where == "output" and first.items["gguf"].where == "output"
    left = {"merged.tmp-1234-abcd1234/model-00001-of-00002.safetensors": 40 * 2**20,
            ".trash-merged-0badc0de/model.safetensors": 20 * 2**20, "merged/model.safetensors": 40 * 2**20,
            "gguf-work/model-f16.gguf.partial": 30 * 2**20, "gguf-work/base-q8_0.gguf": 20 * 2**20,
            "gguf-work/model-q8_0.gguf": 20 * 2**20, "gguf-work/runtime-gguf/logits-0.f32": 10 * 2**20}
    for rel, n in left.items():
        _write(area / rel, n)
    _write(tmp_path / "temp" / "export" / "gguf-work" / "model-f16.gguf.partial", 1000)  # the flat layout before
    capsys.readouterr()
    rerun = diskplan.for_export(out, ckpt, 20 * 10**6, True, True, "q8_0", False)
    assert rerun.temp_room == first.temp_room and rerun.out_room == first.out_room
    assert [i.where for i in rerun.items.values()] == [i.where for i in first.items.values()]
    assert all(p.exists() for p in kept) and sorted(p.name for p in area.iterdir()) == \
        ["gguf-work", "llama.cpp-0.3.16", "notes.txt"] and not list((area / "gguf-work").iterdir())
    assert not (tmp_path / "temp" / "export" / "gguf-work").exists() or \
        not list((tmp_path / "temp" / "export" / "gguf-work").iterdir())
    said = capsys.readouterr().out
    assert "[disk plan] removed what earlier runs left in the temp folder: " in said
    assert f"export/{area.name}/merged.tmp-1234-abcd1234 (0.04 GiB)" in said and "; 0.18 GiB in all" in said
    assert f"export/{area.name}/gguf-work/model-f16.gguf.partial (0.03 GiB)" in said
    assert f"export/{area.name}/gguf-work/runtime-gguf (10.0 MB)" in said


def test_only_the_suites_own_names_are_leftovers():
    own = ["merged", "gguf", "adapter", "adapter_gguf", "gguf-work", "merged.tmp-12-0a0b0c0d", "gguf.tmp-3-12345678",
           ".trash-merged-0a0b0c0d", ".trash-merged.tmp-12-0a0b0c0d-11111111"]
    theirs = ["llama.cpp-0.3.16", "notes.txt", "merged-model", "export-1a2b3c4d", ".trash-mine-0a0b0c0d", "mergedx"]
    assert all(diskplan._own(n) for n in own) and not any(diskplan._own(n) for n in theirs)


def _hub_snapshot(cache, repo, files):
    """A Hub cache holding `files` of `repo` at one commit, laid out as huggingface_hub lays it out."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0" * 40)
    snapshot = folder / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for name, text in files.items():
        (snapshot / name).write_text(text)
    return snapshot


def test_a_base_not_cached_yet_is_counted_as_16_bit_weights_downloaded_into_the_hub_cache(tmp_path, monkeypatch):
    """04 often runs in a session of its own (on Kaggle every notebook does): the merge downloads the base first."""
    import json

    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    assert diskplan.base_download("org/absent", 1000) == (2000, cache)  # nothing of it cached
    _hub_snapshot(cache, "org/configonly", {"config.json": "{}"})  # 01-03 read the config and tokenizer only
    assert diskplan.base_download("org/configonly", 1000) == (2000, cache)
    _hub_snapshot(cache, "org/whole", {"config.json": "{}", "model.safetensors": ""})
    assert diskplan.base_download("org/whole", 1000) == (0, None)
    index = json.dumps({"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}})
    _hub_snapshot(cache, "org/sharded", {"model.safetensors.index.json": index, "model-1.safetensors": ""})
    assert diskplan.base_download("org/sharded", 1000) == (2000, cache)  # a shard missing: downloaded again
    older = _hub_snapshot(cache, "org/older", {"config.json": "{}", "pytorch_model.bin": ""})  # an older upload's
    assert diskplan.base_download("org/older", 1000) == (2000, cache)  # the Hub may have safetensors: asked first
    (older.parent.parent / ".no_exist" / older.name).mkdir(parents=True)
    (older.parent.parent / ".no_exist" / older.name / "model.safetensors").write_text("")  # it said it has none
    assert diskplan.base_download("org/older", 1000) == (0, None)
    assert diskplan.base_download(str(tmp_path), 1000) == (0, None)  # a local folder
    assert diskplan.base_download("embedded", 1000) == (0, None)


def test_the_download_takes_room_from_the_disk_it_shares_and_is_said(tmp_path, monkeypatch):
    import collections

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(diskplan.shutil, "disk_usage", lambda path: usage(2**40, 0, 2**38))  # not the live disk
    sizes = {"adapter": 10, "merged": 20}
    free = diskplan.make_plan(tmp_path / "o", tmp_path / "t", sizes)
    taken = diskplan.make_plan(tmp_path / "o", tmp_path / "t", sizes, download=(2**30, tmp_path / "hub" / "x"))
    assert free.out_room - taken.out_room == 2**30 == free.temp_room - taken.temp_room  # one disk here: both
    assert "base model" in diskplan.text(taken) and "Hub cache" in diskplan.text(taken)
    everything = diskplan.make_plan(tmp_path / "o", tmp_path / "t", sizes, download=(taken.temp_room * 40, tmp_path))
    assert everything.items["merged"].where == "none"  # the download alone fills the disk: no room to merge
