"""Hub push: skips with a reason, a push to a fake Hub on 127.0.0.1, and the folders each choice pushes."""

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nbutils.export import hub


def test_push_skips_with_a_reason(tmp_path, monkeypatch, capsys, hf_token):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert hub.push(str(tmp_path), "") is None
    assert hub.push(str(tmp_path), "me/model") is None
    assert "cannot be reached" in hub.skip_reason("me/model", hf_token, internet=False)
    monkeypatch.setenv("HF_TOKEN", hf_token)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.push(str(tmp_path), "me/model") is None
    out = capsys.readouterr().out
    assert "hub_repo is empty" in out and "no HF_TOKEN secret" in out and "HF_HUB_OFFLINE" in out
    assert hf_token not in out


class FakeHub(BaseHTTPRequestHandler):
    """The few Hub endpoints upload_folder uses, answering like the Hub does; records what it got."""

    calls: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.calls.append((self.path, self.headers.get("Authorization"), body))
        host = f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"
        if self.path == "/api/repos/create":
            payload = {"url": f"{host}/{json.loads(body)['organization'] or ''}/{json.loads(body)['name']}"}
        elif self.path == "/api/validate-yaml":
            payload = {}
        elif "/preupload/" in self.path:
            payload = {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                 for f in json.loads(body)["files"]]}
        elif "/commit/" in self.path:
            payload = {"commitUrl": f"{host}/me/model/commit/abc", "commitOid": "a" * 40}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_push_to_a_fake_hub_on_localhost(tmp_path, monkeypatch, capsys, hf_token):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeHub.calls = []
    try:
        (tmp_path / "README.md").write_text("---\nlibrary_name: peft\n---\n# card\n")
        (tmp_path / "adapter_config.json").write_text("{}")
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_TOKEN", hf_token)
        url = hub.push(str(tmp_path), "me/model")
    finally:
        server.shutdown()
    paths = [c[0] for c in FakeHub.calls]
    created = json.loads(FakeHub.calls[0][2])
    assert paths[0] == "/api/repos/create" and (created.get("visibility") == "private" or created.get("private") is True)
    commit = next(c for c in FakeHub.calls if "/commit/" in c[0])
    lines = [json.loads(line) for line in commit[2].decode().splitlines()]
    sent = {x["value"]["path"]: base64.b64decode(x["value"]["content"]) for x in lines if x["key"] == "file"}
    assert sent == {"README.md": (tmp_path / "README.md").read_bytes(), "adapter_config.json": b"{}"}
    assert all(c[1] == f"Bearer {hf_token}" for c in FakeHub.calls)  # the token goes to the Hub only
    out = capsys.readouterr().out
    assert url and "me/model" in url and "(asked private;" in out and hf_token not in out


class ReadOnlyHub(FakeHub):
    """The Hub refusing a read-only token's commit (the usual token for a gated Llama or Gemma)."""

    def do_POST(self):
        if "/commit/" in self.path:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(403)
            self.end_headers()
            return
        super().do_POST()


def test_a_failed_push_is_said_without_the_token_and_the_export_goes_on(tmp_path, monkeypatch, capsys, hf_token):
    server = ThreadingHTTPServer(("127.0.0.1", 0), ReadOnlyHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "adapter_config.json").write_text("{}")
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_TOKEN", hf_token)
        assert hub.push(str(tmp_path), "me/model") is None
    finally:
        server.shutdown()
    out = capsys.readouterr().out
    assert "[hub] push of" in out and "FAILED" in out and "huggingface-cli upload me/model" in out and hf_token not in out


def test_push_targets():
    assert hub.targets("", "both") == {}
    assert hub.targets("me/m", "adapter") == {"adapter": "me/m"}
    assert hub.targets("me/m", "both") == {"adapter": "me/m", "merged": "me/m-merged"}
    with pytest.raises(ValueError, match="hub_what"):
        hub.targets("me/m", "gguf")


def test_endpoint_follows_hf_endpoint(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert hub.endpoint() == "https://huggingface.co"
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:8080/")
    assert hub.endpoint() == "http://127.0.0.1:8080"


def test_reachable_opens_a_connection_to_the_host():
    import socket

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    port = listening.getsockname()[1]
    try:
        assert hub.reachable(f"http://127.0.0.1:{port}/api")
    finally:
        listening.close()
    assert not hub.reachable(f"http://127.0.0.1:{port}/api", timeout=1)  # nothing listens there now
