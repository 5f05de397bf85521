"""Warm probe workers (rlbisect.bisect.predicates.warm): the same output as a fresh interpreter,
probes isolated from each other, timeouts kill the probe's whole group, and any failure of the
server falls back to a fresh interpreter."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from helpers import live_members
from rlbisect.bisect.predicates.command import run_command
from rlbisect.bisect.predicates.warm import _Pool, run_python

ROOT = Path(__file__).resolve().parents[2]
INVARIANTS = "rlbisect.bisect.predicates.invariants"
TRAIN_RUNS = "rlbisect.bisect.predicates.train_runs"

RUNNER = """
import os, sys, time, torch
def run(steps, seed):
    seen = getattr(torch, "_touched_by_a_probe", None)
    torch._touched_by_a_probe = seed                 # state a later probe must not see
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.Adam([w])
    w.grad = torch.ones(2)
    opt.step()
    if steps == 99:
        os.makedirs("pids", exist_ok=True)
        open(f"pids/{os.getpid()}", "w").close()
        time.sleep(60)
    return [{"step": 0, "seen": seen, "dynamo": "torch._dynamo" in sys.modules,
             "pgid_is_pid": os.getpgid(0) == os.getpid()}]
"""


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "slowrunner.py").write_text(RUNNER)
    return tmp_path


def _rows(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_warm_invariants_probe_prints_exactly_what_a_fresh_one_prints():
    cold = run_command([sys.executable, "-I", "-m", INVARIANTS, str(ROOT)], ROOT, 600)
    warm = [run_python(INVARIANTS, [str(ROOT)], ROOT, 600) for _ in range(2)]
    assert cold.returncode in (0, 1) and json.loads(cold.stdout)
    assert [w.returncode for w in warm] == [cold.returncode] * 2
    assert warm[0].stdout == warm[1].stdout == cold.stdout        # every check value, bit for bit


def test_probes_in_one_server_do_not_see_each_other(checkout):
    args = [str(checkout), "--runner", "slowrunner:run", "--steps", "1", "--seeds"]
    first, second = (_rows(run_python(TRAIN_RUNS, [*args, seed], checkout, 300)) for seed in ("1", "2"))
    assert first["1"][0]["seen"] is None and second["2"][0]["seen"] is None
    assert first["1"][0]["pgid_is_pid"] and first["1"][0]["dynamo"] is False


def test_a_timeout_kills_the_warm_probe_and_its_group(checkout):
    t0 = time.perf_counter()
    r = run_python(TRAIN_RUNS, [str(checkout), "--runner", "slowrunner:run", "--steps", "99", "--seeds", "1"],
                   checkout, timeout=8)
    assert r.timed_out and time.perf_counter() - t0 < 30
    pid = int(next((checkout / "pids").iterdir()).name)
    assert live_members(pid, settle=5) == []
    again = run_python(TRAIN_RUNS, [str(checkout), "--runner", "slowrunner:run", "--steps", "1", "--seeds", "3"],
                       checkout, 300)
    assert _rows(again)["3"][0]["seen"] is None          # the server survived the kill


def test_a_dead_server_or_cold_mode_falls_back_to_a_fresh_interpreter(checkout, monkeypatch):
    args = [str(checkout), "--runner", "slowrunner:run", "--steps", "1", "--seeds", "4"]
    _rows(run_python(TRAIN_RUNS, args, checkout, 300))             # a server is now idle
    for server in _Pool._idle:
        server.proc.kill()
        server.proc.wait()
    fallback = _rows(run_python(TRAIN_RUNS, args, checkout, 300))
    assert fallback["4"][0] == {"step": 0, "seen": None, "dynamo": False, "pgid_is_pid": True}
    monkeypatch.setenv("RLBISECT_COLD", "1")
    before = len(_Pool._idle)
    cold = _rows(run_python(TRAIN_RUNS, args, checkout, 300))
    assert cold == fallback and len(_Pool._idle) == before


def test_only_rlbisect_workers_are_served_warm(tmp_path):
    (tmp_path / "mod.py").write_text("import sys; print(sys.flags.isolated)")
    r = run_python("mod", [], tmp_path, 60)       # not a worker: a fresh `python -I -m mod`
    assert r.returncode == 1 and "No module named mod" in r.stderr   # -I: the folder is not on sys.path
