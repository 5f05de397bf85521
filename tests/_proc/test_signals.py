"""Kill tests: SIGINT / SIGTERM to a running `rlbisect run` during a probe."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path

import pytest

from helpers import live_members, start_rlbisect, wait_for

pytestmark = pytest.mark.slow   # they start torch processes or train: tests/conftest.py


@pytest.mark.parametrize("sig,code,trap", [
    (signal.SIGINT, 130, ""),
    (signal.SIGTERM, 143, ""),
    (signal.SIGTERM, 143, "trap '' TERM INT; "),  # a predicate that ignores SIGTERM gets SIGKILL
])
def test_signal_during_a_probe_cleans_up_everything(tiny_repo, tmp_path, sig, code, trap):
    r = tiny_repo(["good"] * 4 + ["bad"] * 4)
    before = r.snapshot()
    pidfile = tmp_path / "predicate.pid"
    proc = start_rlbisect(r.path, ["sh", "-c", f"{trap}echo $$ > {pidfile}; sleep 60 & wait"],
                          "--json", str(tmp_path / "partial.json"))
    pgid = int(wait_for(pidfile, proc))
    assert live_members(pgid)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == code, (out, err)
    assert "interrupted by" in out and "Traceback" not in err
    partial = json.loads((tmp_path / "partial.json").read_text())
    assert partial["status"] == "interrupted" and partial["exit_code"] == code
    assert partial["first_bad"] is None and partial["n_probes"] == 0
    assert live_members(pgid, settle=2.0) == []
    assert not list(Path(tempfile.gettempdir()).glob(f"rlbisect-{proc.pid}-*"))
    assert r.snapshot() == before


def test_interrupted_probe_is_not_cached_and_a_restart_completes(tiny_repo, tmp_path):
    r = tiny_repo(["good"] * 4 + ["bad"] * 4)
    pidfile = tmp_path / "pid"
    block = tmp_path / "block"
    block.touch()
    cmd = ["sh", "-c", f'if [ -e {block} ]; then echo $$ > {pidfile}; sleep 60; fi; '
                       'test "$(cat state)" = good']
    proc = start_rlbisect(r.path, cmd)
    wait_for(pidfile, proc)
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=20) == 130
    block.unlink()
    again = start_rlbisect(r.path, cmd, "--json", str(tmp_path / "out.json"))
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, (out, err)
    assert f"{r.shas[4]} is the first bad commit" in out
    first = json.loads((tmp_path / "out.json").read_text())["probes"][0]
    assert first["verdict"] in ("good", "bad") and not first["cached"]


def test_a_sigkilled_run_leaves_nothing_in_the_repo_and_its_probe_dies_with_it(tiny_repo, tmp_path):
    r = tiny_repo(["good"] * 4 + ["bad"] * 4)
    before = r.snapshot()
    pidfile = tmp_path / "pid"
    proc = start_rlbisect(r.path, ["sh", "-c", f"echo $$ > {pidfile}; sleep 60 & wait"])
    pgid = int(wait_for(pidfile, proc))
    assert live_members(pgid)
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait(timeout=10)
    assert live_members(pgid, settle=5.0) == []      # the watchdog killed the predicate's group
    assert r.snapshot() == before                     # nothing new in the user's repository
    assert list(Path(tempfile.gettempdir()).glob(f"rlbisect-{proc.pid}-*"))   # our temp dir...
    again = start_rlbisect(r.path, ["sh", "-c", 'test "$(cat state)" = good'])
    out, _ = again.communicate(timeout=60)
    assert again.returncode == 0 and f"{r.shas[4]} is the first bad commit" in out
    assert not list(Path(tempfile.gettempdir()).glob(f"rlbisect-{proc.pid}-*"))   # ...is swept
    assert r.snapshot() == before
