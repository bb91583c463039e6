"""The simulated Kaggle background run of one notebook: fresh folders, the kernel's environment, read-only inputs,
the network guard, and the fingerprints that find writes root's chmod would not stop."""

import os
import subprocess
import sys

import pytest

from nbutils.harness import sandbox


def test_create_makes_fresh_folders_and_removes_an_earlier_run(tmp_path):
    box = sandbox.create(tmp_path, "nb")
    assert box.root == tmp_path / "sandbox" / "nb" and all(p.is_dir() for p in (box.input, box.working, box.temp))
    assert (box.root / "site" / "sitecustomize.py").read_text() == sandbox.SITECUSTOMIZE
    assert box.events.exists() and box.read_events() == []
    (box.working / "left.txt").write_text("from the last run")
    sandbox.mount_readonly(box.working, box, "upstream")  # read-only leftovers are removed too
    again = sandbox.create(tmp_path, "nb")
    assert not (again.working / "left.txt").exists() and not (again.input / "upstream").exists()


def test_environment_is_a_kaggle_batch_run_with_every_cache_inside(tmp_path):
    box = sandbox.create(tmp_path, "nb")
    env = sandbox.environment(box, internet=True, base={"PATH": "/usr/bin", "HF_HUB_OFFLINE": "0"})
    assert env["KAGGLE_KERNEL_RUN_TYPE"] == "Batch" and env["NBUTILS_WORKING_ROOT"] == str(box.working)
    assert env["NBUTILS_INPUT_ROOT"] == str(box.input) and env["MPLBACKEND"] == "Agg"
    assert env["COLAB_RELEASE_TAG"]  # Kaggle's image, built on Colab's, sets it: branches on COLAB_ go Kaggle's way
    for var in sandbox.CACHE_VARS:
        assert env[var].startswith(str(box.temp)) and os.path.isdir(env[var]), var
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)  # `!pip` is the kernel's pip
    assert "PIP_NO_INDEX" not in env and env["HF_HUB_OFFLINE"] == "0"
    offline = sandbox.environment(box, internet=False, base={"PATH": "/usr/bin", "HF_HUB_OFFLINE": "1"})
    assert offline["NBUTILS_NO_INTERNET"] == "1"
    # Kaggle sets no offline variable: the libraries must take the request and failure paths they take there.
    assert not {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "PIP_NO_INDEX"} & set(offline)


def test_a_twins_environment_keeps_the_checkout_and_pip_setup_out(tmp_path):
    box = sandbox.create(tmp_path, "nb")
    base = {"PATH": "/usr/bin", "PYTHONPATH": "/checkout", "PIP_INDEX_URL": "http://mirror", "VIRTUAL_ENV": "/venv"}
    env = sandbox.environment(box, internet=False, base=base, python="/twins/copy/bin/python")
    assert env["PYTHONPATH"] == str(box.root / "site") and env["PIP_CONFIG_FILE"] == os.devnull
    assert not {"PIP_INDEX_URL", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE"} & set(env)
    assert env["PATH"].startswith("/twins/copy/bin" + os.pathsep)


def test_network_guard_refuses_and_logs_a_connection_but_not_loopback(tmp_path):
    box = sandbox.create(tmp_path, "nb")
    env = sandbox.environment(box, internet=False)
    probe = ("import socket\n"
             "s = socket.socket()\n"
             "try:\n    s.connect(('0.0.0.1', 80))\nexcept OSError as e:\n    print('refused:', e)\n"
             "print('loopback:', socket.socket().connect_ex(('127.0.0.1', 9)) != 0)\n")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert "refused: [Errno 101] internet is off in this run" in out.stdout, out.stdout + out.stderr
    assert "loopback: True" in out.stdout  # a closed local port, refused by the OS, not by the guard
    assert box.read_events() == [{"type": "network-access", "address": "0.0.0.1", "execution_count": None}]


def test_network_guard_fails_lookups_as_an_offline_kaggle_kernel_and_lets_the_suites_probes_ask(tmp_path):
    """DNS resolves on most machines, so has_internet() said True in an "offline" run and the install took its online
    branch; and the hub's offline variables kept every Hub request (and network-access) from happening at all."""
    box = sandbox.create(tmp_path, "nb")
    env = sandbox.environment(box, internet=False)
    probe = ("import socket\n"
             "try:\n    socket.getaddrinfo('pypi.org', 443)\nexcept socket.gaierror as e:\n    print('lookup:', e)\n"
             "print('here:', all(socket.getaddrinfo(h, 80) for h in ('localhost', '10.0.0.1', '::1')))\n"
             "from nbutils.runtime.install import has_internet\nprint('has_internet:', has_internet())\n"
             "from nbutils.export.hub import reachable\nprint('reachable:', reachable('https://huggingface.co'))\n")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert "lookup: [Errno -3] Temporary failure in name resolution" in out.stdout, out.stdout + out.stderr
    assert "here: True" in out.stdout and "has_internet: False" in out.stdout and "reachable: False" in out.stdout
    # The lookup is an attempt; the suite's own probes asked on purpose and took "no" for an answer.
    assert box.read_events() == [{"type": "network-access", "address": "pypi.org", "execution_count": None}]


def test_mounted_inputs_are_read_only_copies(tmp_path):
    (tmp_path / "upstream" / "sub").mkdir(parents=True)
    (tmp_path / "upstream" / "sub" / "data.json").write_text("{}")
    box = sandbox.create(tmp_path / "out", "nb")
    dest = sandbox.mount_readonly(tmp_path / "upstream", box, "slug")
    assert dest == box.input / "slug" and (dest / "sub" / "data.json").read_text() == "{}"
    assert not os.stat(dest / "sub" / "data.json").st_mode & 0o222 and not os.stat(dest / "sub").st_mode & 0o222
    assert os.stat(tmp_path / "upstream" / "sub" / "data.json").st_mode & 0o200  # the source is untouched
    sandbox.make_writable(dest)
    assert os.stat(dest / "sub").st_mode & 0o200 and not os.stat(dest / "sub" / "data.json").st_mode & 0o222


def test_removing_an_old_sandbox_leaves_a_running_ones_linked_input_as_it_was(tmp_path):
    # Two twins' runs hard-link the same dataset as their input: one run's clean-up must not move the other's
    # fingerprint (a file's mode belongs to its inode, shared by every link).
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "a.whl").write_bytes(b"wheel")
    running, old = (sandbox.create(tmp_path / name, "04_export") for name in ("run1", "run2"))
    for box in (running, old):
        sandbox.mount_readonly(tmp_path / "dataset", box, "qlora-nbutils", link=True)
    before = sandbox.fingerprint(running.input)
    sandbox.create(tmp_path / "run2", "04_export")  # the second run starts again: its old sandbox goes
    assert sandbox.changed(before, sandbox.fingerprint(running.input)) == []
    assert not (tmp_path / "run2" / "sandbox" / "04_export" / "input" / "qlora-nbutils").exists()


def test_fingerprints_find_added_removed_and_rewritten_files(tmp_path):
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    before = sandbox.fingerprint(tmp_path)
    assert set(before) == {"a.txt", "b.txt"} and sandbox.changed(before, sandbox.fingerprint(tmp_path)) == []
    (tmp_path / "a.txt").write_text("longer")
    (tmp_path / "b.txt").unlink()
    (tmp_path / "c.txt").write_text("c")
    assert sandbox.changed(before, sandbox.fingerprint(tmp_path)) == ["a.txt", "b.txt", "c.txt"]


def test_usage_counts_files_and_bytes_not_links(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.bin").write_bytes(b"0" * 10)
    (tmp_path / "y.bin").write_bytes(b"0" * 5)
    (tmp_path / "link").symlink_to(tmp_path / "y.bin")
    assert sandbox.usage(tmp_path) == (15, 2)


@pytest.mark.parametrize("name", ["HOME", "TMPDIR"])
def test_home_and_temp_never_point_outside(tmp_path, name):
    box = sandbox.create(tmp_path, "nb")
    env = sandbox.environment(box, internet=True, base={"PATH": "/usr/bin", name: "/root"})
    assert env[name] == str(box.temp / name.lower())
