"""rlbisect.launch: which invocations go to the warm server, and when a caller counts as the
server's own (the server side is tests/test_warm_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbisect import launch


def test_a_folder_others_can_open_is_refused(tmp_path, monkeypatch):
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o755)
    open_folder.chmod(0o755)
    monkeypatch.setenv("RLBISECT_WARM_DIR", str(open_folder))
    with pytest.raises(launch.WarmError, match="no one else can open"):
        launch.home()
    assert launch.forward(["check"]) is None          # and a check just runs here


def test_shell_bookkeeping_does_not_make_another_caller(monkeypatch):
    me = launch.identity()
    monkeypatch.setenv("PWD", "/elsewhere")
    monkeypatch.setenv("SHLVL", "7")
    assert launch.mismatch(me, launch.identity()) is None
    monkeypatch.setenv("OMP_NUM_THREADS", "3")      # what torch reads at import does
    assert "OMP_NUM_THREADS" in launch.mismatch(me, launch.identity())


def test_only_check_is_forwarded(monkeypatch):
    monkeypatch.setenv("RLBISECT_WARM_DIR", "/nonexistent/rlbisect-warm")
    assert launch.forward(["run", "a..b"]) is None
    assert launch.forward(["check"]) is None      # no server: the CLI runs it, nothing created
    assert not Path("/nonexistent/rlbisect-warm").exists()
