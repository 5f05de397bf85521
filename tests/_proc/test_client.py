"""rlbisect._proc.client: which invocations go to a warm server (the server side is
tests/_proc/test_server.py, probes through it tests/_proc/test_workers.py)."""

from __future__ import annotations

from rlbisect._proc import client


def test_only_check_is_forwarded_and_asking_creates_nothing(tmp_path, monkeypatch):
    folder = tmp_path / "warm"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("RLBISECT_WARM_DIR", str(folder))
    assert client.forward(["run", "a..b"]) is None        # never forwarded
    assert client.forward(["check"]) is None              # no server: the CLI runs it here
    assert list(folder.iterdir()) == []                   # and nothing was created to ask
    monkeypatch.setenv("RLBISECT_WARM_DIR", str(tmp_path / "missing"))
    assert client.forward(["check"]) is None and client.status() is None
    assert not (tmp_path / "missing").exists()


def test_cold_mode_never_asks_a_server(monkeypatch, tmp_path):
    monkeypatch.setenv("RLBISECT_COLD", "1")
    monkeypatch.setattr(client.ident, "connect", lambda path: (_ for _ in ()).throw(AssertionError(path)))
    assert client.forward(["check"]) is None
