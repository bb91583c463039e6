"""Shared fixtures of the Kaggle tooling tests: the real kaggle client with the network replaced at the HTTP send."""

import json
import socket

import pytest
import requests


class FakeKaggle:
    """Stands in for api.kaggle.com at requests.Session.send: everything above it (validation, the request
    object, its JSON, the response parsing) is the real client's code."""

    def __init__(self):
        self.calls, self.error, self.statuses = [], "", {}

    def send(self, session, request, **kwargs):
        name = request.url.rsplit("/", 1)[-1]
        body = json.loads(request.body) if request.body else {}
        self.calls.append((name, body))
        if name == "SaveKernel":
            payload = {"ref": body["slug"], "url": f"https://www.kaggle.com/code/{body['slug']}", "versionNumber": 1,
                       "error": self.error}
        elif name == "GetKernelSessionStatus":  # a run is seen running, then ends (statuses: the sequence, last repeats)
            seq = self.statuses.setdefault(body["kernelSlug"], ["RUNNING", "COMPLETE"])
            payload = {"status": seq.pop(0) if len(seq) > 1 else seq[0]}
        else:
            raise AssertionError(f"unexpected Kaggle call {name}")
        response = requests.Response()
        response.status_code, response.url, response.request = 200, request.url, request
        response.headers["Content-Type"] = "application/json"
        response._content = json.dumps(payload).encode()
        return response


@pytest.fixture()
def fake_kaggle(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("a test tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    for var in ("KAGGLE_API_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_CONFIG_DIR", "KAGGLE_PUSH_WAIT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no real ~/.kaggle credentials are read
    from kaggle.api.kaggle_api_extended import KaggleApi  # noqa: F401 -- imported with the network blocked

    server = FakeKaggle()
    monkeypatch.setattr(requests.Session, "send", lambda session, request, **kw: server.send(session, request, **kw))
    return server


@pytest.fixture()
def api(fake_kaggle):
    from kaggle.api.kaggle_api_extended import KaggleApi

    return KaggleApi()
