"""Which checkpoint a run resumes (training._pick_resume on stand-in checkpoints, no training): the same run's, a
longer one's, a refusal naming each setting that differs, and a smoke run's moved aside by a real run."""

import pytest
import torch

from nbutils.train import checkpoints, runsettings, training

SMOKE = {"smoke": True, "training.max_steps": 10}
REAL = {"training.max_steps": 400}


def _model():
    return torch.nn.Linear(2, 2)  # only its trainable parameter count is read (for the disk check)


@pytest.mark.parametrize("change, key", [({"target_modules": ["q_proj", "v_proj"]}, "lora.target_modules"),
                                         ({"lora_alpha": 32}, "lora.lora_alpha")])
def test_resume_refuses_a_checkpoint_of_another_lora_config(tmp_path, fake_checkpoint, change, key):
    """A learner who edits 02's LoraConfig (not lora_r) gets a refusal naming the key, not a mixed run."""
    from peft import LoraConfig

    lora = lambda **kw: {"lora": runsettings.lora_settings(LoraConfig(**{"r": 16, "lora_alpha": 16,  # noqa: E731
                                                               "target_modules": "all-linear", **kw}))}
    trained = runsettings.settings(lora())
    ckpt = fake_checkpoint(tmp_path / "trainer" / "checkpoint-10", 10, settings=trained)
    model = _model()
    with pytest.raises(checkpoints.ResumeMismatchError, match=rf"\n- {key}: checkpoint has ") as err:
        training._pick_resume(tmp_path, True, 2, runsettings.settings(lora(**change)), model, main=True)
    assert len(str(err.value).split("\n- ")) == 2, str(err.value)  # that key alone
    assert training._pick_resume(tmp_path, True, 2, trained, model, main=True) == ckpt


@pytest.mark.parametrize("before, after, resumes", [({"max_steps": 10}, {"max_steps": 20}, True),
                                                    ({"num_train_epochs": 1}, {"num_train_epochs": 2}, True),
                                                    ({"max_steps": 20}, {"max_steps": 10}, False),
                                                    ({"max_steps": -1}, {"max_steps": 10}, False)])
def test_resume_trains_longer_but_refuses_a_shorter_length(tmp_path, fake_checkpoint, capsys, before, after, resumes):
    """Training longer is the one change a resume takes on purpose; a shorter length (or max_steps newly set over
    epochs, which may be either) is a mismatch like any other, named."""
    trained = runsettings.settings({"training": {"learning_rate": 2e-4, **before}})
    ckpt = fake_checkpoint(tmp_path / "trainer" / "checkpoint-10", 10, settings=trained)
    now = runsettings.settings({"training": {"learning_rate": 2e-4, **after}})
    model = _model()
    if resumes:
        assert training._pick_resume(tmp_path, True, 2, now, model, main=True) == ckpt
        assert "training longer (training." in capsys.readouterr().out
    else:
        key = next(iter(after))
        with pytest.raises(checkpoints.ResumeMismatchError, match=rf"\n- training.{key}: checkpoint has "):
            training._pick_resume(tmp_path, True, 2, now, model, main=True)


def test_a_real_run_moves_a_smoke_runs_checkpoints_aside_and_starts_over(tmp_path, fake_checkpoint, capsys):
    """smoke=True then smoke=False in one output_dir (the README's order): the real run neither continues the spent
    schedule nor stops after loading the model; it moves the smoke run's checkpoints aside, saying so, and starts over."""
    fake_checkpoint(tmp_path / "trainer" / "checkpoint-10", 10, settings=SMOKE)
    assert training._pick_resume(tmp_path, True, 2, REAL, _model(), main=False) is None  # another rank: no move
    assert (tmp_path / "trainer" / "checkpoint-10").is_dir() and not capsys.readouterr().out
    assert training._pick_resume(tmp_path, True, 2, REAL, _model(), main=True) is None
    [aside] = tmp_path.glob("trainer.before-*")
    assert [p.name for p in checkpoints.checkpoint_dirs(aside)] == ["checkpoint-10"]
    assert not checkpoints.checkpoint_dirs(tmp_path / "trainer")
    [line] = capsys.readouterr().out.splitlines()
    assert "smoke run's" in line and "starts over" in line and str(aside) in line, line


def test_every_rank_has_read_the_checkpoints_before_the_main_one_moves_any(tmp_path, fake_checkpoint, monkeypatch):
    """On 2 GPUs each rank hashes the checkpoints it may resume; a move by rank 0 while rank 1 still reads them
    killed rank 1 (FileNotFoundError). A collective (agree: an all-reduce, so a barrier) comes between."""
    fake_checkpoint(tmp_path / "trainer" / "checkpoint-10", 10, settings=SMOKE)
    order = []
    find, move = checkpoints.find_resumable, checkpoints.move_aside
    monkeypatch.setattr(checkpoints, "find_resumable", lambda out: order.append("read") or find(out))
    monkeypatch.setattr(checkpoints, "move_aside", lambda *a: order.append("move") or move(*a))
    monkeypatch.setattr(training, "agree", lambda flag: order.append("barrier") or flag)
    training._pick_resume(tmp_path, True, 2, REAL, _model(), main=True)
    assert order[order.index("read"):] == ["read", "barrier", "move"], order


def test_a_smoke_checkpoint_in_an_attached_output_is_not_resumed_and_left_there(tmp_path, fake_checkpoint, capsys,
                                                                                  monkeypatch):
    attached = fake_checkpoint(tmp_path / "input" / "train_qlora" / "trainer" / "checkpoint-10", 10, settings=SMOKE)
    monkeypatch.setattr(checkpoints, "find_resumable", lambda output_dir: attached)
    out = tmp_path / "out"
    out.mkdir()
    assert training._pick_resume(out, True, 2, REAL, _model(), main=True) is None
    assert checkpoints.is_complete(attached) and not list(out.glob("trainer.before-*"))
    assert "leaves it where it is" in capsys.readouterr().out


def test_a_smoke_run_refuses_to_continue_a_real_run(tmp_path, fake_checkpoint):
    """A smoke run into a real run's folder would replace its final checkpoint: refused, the checkpoints untouched."""
    ckpt = fake_checkpoint(tmp_path / "trainer" / "checkpoint-10", 10, settings=SMOKE)  # smoke resumes smoke
    assert training._pick_resume(tmp_path, True, 2, SMOKE, _model(), main=True) == ckpt
    real = fake_checkpoint(tmp_path / "real" / "trainer" / "checkpoint-200", 200, settings=REAL)
    with pytest.raises(checkpoints.ResumeMismatchError, match=r"\n- smoke: checkpoint has False, this run True") as err:
        training._pick_resume(tmp_path / "real", True, 2, SMOKE, _model(), main=True)
    assert "output_dir of its own" in str(err.value) and checkpoints.problems(real, resumable=True) == []


def test_num_epochs_changed_under_a_set_max_steps_resumes_as_the_same_run(tmp_path, fake_checkpoint, capsys):
    """With max_steps set the Trainer ignores num_train_epochs: a change of it neither refuses the resume nor is
    announced as training longer."""
    trained = runsettings.settings({"training": {"max_steps": 500, "num_train_epochs": 1}})
    ckpt = fake_checkpoint(tmp_path / "trainer" / "checkpoint-10", 10, settings=trained)
    now = runsettings.settings({"training": {"max_steps": 500, "num_train_epochs": 3}})
    assert training._pick_resume(tmp_path, True, 2, now, _model(), main=True) == ckpt
    assert "training longer" not in capsys.readouterr().out


@pytest.mark.parametrize("own_steps, final_step", [([], 10), ([5], 10), ([15], 15)])
def test_a_nan_stop_falls_back_on_the_checkpoint_the_run_resumed_from(tmp_path, fake_checkpoint, own_steps, final_step):
    """On Kaggle a run resumes from the attached earlier output (/kaggle/input/<prev>/train_qlora/trainer/checkpoint-N):
    a NaN before its first save in the new folder still leaves that verified checkpoint, copied (adapter only) as the
    final one; a newer checkpoint of the new folder wins."""
    attached = fake_checkpoint(tmp_path / "input" / "prev" / "train_qlora" / "trainer" / "checkpoint-10", 10)
    out = tmp_path / "working" / "train_qlora"
    for step in own_steps:
        fake_checkpoint(out / "trainer" / f"checkpoint-{step}", step)
    result = training.TrainResult(12, "nan", "", 10, 1.0, float("nan"), 1.0, [], {}, resumed_from=str(attached))
    final = training.save_checkpoint(None, None, out, result)
    assert final == out / "checkpoint" and checkpoints.problems(final) == []
    assert checkpoints.checkpoint_step(final) == final_step and not (final / "optimizer.pt").exists()
    assert checkpoints.problems(attached, resumable=True) == []  # the attached input is read, never changed
