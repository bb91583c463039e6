"""The base model cannot be reached: the suite's message, at once, instead of a minute of retries and a traceback.

The Hub here is a local HTTP server that answers as the Hugging Face Hub does (status and X-Error-Code headers,
which huggingface_hub turns into GatedRepoError and RepositoryNotFoundError), and "the internet off" is an
endpoint nobody listens on. Each case runs in a fresh interpreter: huggingface_hub reads HF_ENDPOINT at import,
as a notebook kernel does.
"""

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nbutils.runtime import modelsource

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
from nbutils.runtime import modelsource
try:
    modelsource.check(sys.argv[1])
    print("OK")
except modelsource.ModelNotReachable as e:
    print("REFUSED", e)
"""


class FakeHub(BaseHTTPRequestHandler):
    """auth-check answers of the Hub: 200 for a public model, 403 GatedRepo for a gated one without access."""

    def do_GET(self):  # noqa: N802 -- http.server's name
        repo = self.path.removeprefix("/api/models/").removesuffix("/auth-check")
        token = self.headers.get("authorization", "")
        if repo == "meta-llama/Llama-3.2-1B-Instruct" and "hf_allowed" not in token:
            self._answer(403, "GatedRepo", "Access to model meta-llama/Llama-3.2-1B-Instruct is restricted.")
        elif repo == "Qwen/Qwen2.5-0.5B-Instruct" or repo == "meta-llama/Llama-3.2-1B-Instruct":
            self._answer(200, None, "")
        else:
            self._answer(404, "RepoNotFound", "Repository not found")

    def _answer(self, status, code, message):
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"error": message} if code else {}).encode())

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again when the block ends: nobody listens


def check(model: str, endpoint: str, tmp_path, **env) -> tuple[str, float]:
    base = {"PATH": "/usr/bin:/bin", "HF_ENDPOINT": endpoint, "HF_HUB_CACHE": str(tmp_path / "hub"),
            "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", PROBE, model], capture_output=True, text=True, cwd=ROOT,
                         env={**base, **env}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip(), time.monotonic() - t0


def test_a_public_model_on_a_reachable_hub_passes(hub, tmp_path):
    assert check("Qwen/Qwen2.5-0.5B-Instruct", hub, tmp_path)[0] == "OK"


def test_the_internet_off_says_what_to_attach_at_once(tmp_path):
    said, seconds = check("Qwen/Qwen2.5-0.5B-Instruct", _closed_port(), tmp_path)
    assert said.startswith("REFUSED The base model 'Qwen/Qwen2.5-0.5B-Instruct' cannot be reached: it is not in this "
                           "machine's cache"), said
    assert "set base_model to that folder" in said and "huggingface-cli download" in said
    assert seconds < 30  # transformers alone retries for about a minute first
    kaggle, _ = check("Qwen/Qwen2.5-0.5B-Instruct", _closed_port(), tmp_path, KAGGLE_KERNEL_RUN_TYPE="Batch")
    assert "Add Input > Models" in kaggle and "/kaggle/input/" in kaggle and "config.json" in kaggle, kaggle


def test_offline_mode_is_the_same_message(hub, tmp_path):
    said, _ = check("Qwen/Qwen2.5-0.5B-Instruct", hub, tmp_path, HF_HUB_OFFLINE="1")
    assert "cannot be reached" in said and "HF_HUB_OFFLINE is set" in said


def test_a_gated_model_without_a_token_says_so_and_where_to_add_it(hub, tmp_path):
    said, _ = check("meta-llama/Llama-3.2-1B-Instruct", hub, tmp_path)
    assert "is a gated model and no HF_TOKEN was found" in said, said
    assert "https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct" in said and "secret named HF_TOKEN" in said
    assert "nbutils.runtime.secrets.get_secret" in said


def test_a_gated_model_with_a_token_without_access_says_that_instead(hub, tmp_path):
    said, _ = check("meta-llama/Llama-3.2-1B-Instruct", hub, tmp_path, HF_TOKEN="hf_" + "x" * 34)
    assert "the HF_TOKEN found here has no access to it yet" in said, said
    assert "hf_xxx" not in said  # the token itself is never printed
    assert check("meta-llama/Llama-3.2-1B-Instruct", hub, tmp_path, HF_TOKEN="hf_allowed" + "x" * 30)[0] == "OK"


def test_a_misspelt_id_is_named(hub, tmp_path):
    said, _ = check("Qwen/Qwen2.5-0.5B-Instruc", hub, tmp_path)
    assert "no model 'Qwen/Qwen2.5-0.5B-Instruc' on the Hugging Face Hub: check the spelling" in said, said


def test_folders_are_read_without_any_network(tmp_path, embedded_dir):
    modelsource.check(str(embedded_dir / "model"))  # a model folder: no question asked
    nested = tmp_path / "llama-3.2" / "transformers" / "1b-instruct" / "1"
    nested.mkdir(parents=True)
    (nested / "config.json").write_text("{}")
    with pytest.raises(modelsource.ModelNotReachable, match=r"folder without config.json.*set base_model to '.*/1'"):
        modelsource.check(str(tmp_path / "llama-3.2"))
    with pytest.raises(modelsource.ModelNotReachable, match="neither a folder on this machine nor a Hub id"):
        modelsource.check("/kaggle/input/not-attached")


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_nested_model_folder_is_found_at_any_of_three_levels(tmp_path, depth):
    """A Kaggle Model input nests its files (<name>/<framework>/<variation>/<version>): the message names the
    folder holding config.json, one, two or three levels down, and does not claim which level."""
    nested = tmp_path.joinpath("model", *[f"level{i}" for i in range(1, depth + 1)])
    nested.mkdir(parents=True)
    (nested / "config.json").write_text("{}")
    with pytest.raises(modelsource.ModelNotReachable) as err:
        modelsource.check(str(tmp_path / "model"))
    assert f"set base_model to {str(nested)!r}" in str(err.value) and "one level down" not in str(err.value)


def test_the_tokenizer_load_in_01_gives_the_message(tmp_path):
    """01's first cell that needs the model is the tokenizer load: it says it, not transformers' OSError."""
    from nbutils.data import chatformat

    with pytest.raises(modelsource.ModelNotReachable, match="neither a folder on this machine nor a Hub id"):
        chatformat.load_tokenizer(str(tmp_path / "missing"))
