"""Probe workers through the fork server (rlbisect._proc.client.run_python / ask): the same reply
as a fresh interpreter, probes isolated from each other, timeouts kill the probe's whole group,
a server that goes away or refuses falls back to a fresh interpreter, and the code under test is
never served from what a server preloaded."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from helpers import live_members
from rlbisect._proc import client
from rlbisect._proc.runner import run
from rlbisect._proc.worker import read_reply
from rlbisect.errors import Cause, Verdict

pytestmark = pytest.mark.slow   # they start torch processes: tests/conftest.py

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
    if steps == 7:
        raise ZeroDivisionError("the trainer's own bug")
    return [{"step": 0, "seen": seen, "dynamo": "torch._dynamo" in sys.modules,
             "pgid_is_pid": os.getpgid(0) == os.getpid()}]
"""


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "slowrunner.py").write_text(RUNNER)
    return tmp_path


def _train(checkout: Path, steps: int, seed: int, timeout: float = 300):
    return client.ask(TRAIN_RUNS, ["--runner", "slowrunner:run", "--steps", str(steps), "--seeds", str(seed)],
                      checkout, timeout)


def _rows(checkout: Path, seed: int) -> list[dict]:
    reply, done = _train(checkout, 1, seed)
    assert reply is not None and reply.verdict is Verdict.GOOD, done.stderr
    return reply.data[str(seed)]


def test_a_served_invariants_probe_replies_exactly_what_a_fresh_one_replies(tmp_path):
    replies = []
    for i, how in enumerate(("cold", "served", "served")):
        path = tmp_path / f"reply{i}.json"
        args = ["--code-dir", str(ROOT), "--reply", str(path)]
        done = (run([sys.executable, "-I", "-m", INVARIANTS, *args], ROOT, 600) if how == "cold"
                else client.run_python(INVARIANTS, args, ROOT, 600))
        assert done.returncode == 0, done.stderr
        replies.append(json.loads(path.read_text()))
    assert replies[0]["verdict"] == "good" and replies[0]["detail"]["checks"]
    assert replies[0] == replies[1] == replies[2]          # every check value, bit for bit
    assert client._Private.proc is not None                  # the served ones came from the server


def test_probes_in_one_server_do_not_see_each_other(checkout):
    first, second = _rows(checkout, 1), _rows(checkout, 2)
    assert first[0]["seen"] is None and second[0]["seen"] is None
    assert first[0]["pgid_is_pid"] and first[0]["dynamo"] is False


def test_the_exit_contract_bad_when_the_code_raises_skip_when_it_cannot_run(checkout):
    reply, done = _train(checkout, 7, 1)
    assert (reply.verdict, reply.cause, done.returncode) == (Verdict.BAD, Cause.RAISED, 1)
    assert "ZeroDivisionError: the trainer's own bug" in reply.reason
    reply, done = client.ask(TRAIN_RUNS, ["--runner", "nothere:run", "--steps", "1", "--seeds", "1"],
                             checkout, 300)
    assert (reply.verdict, reply.cause, done.returncode) == (Verdict.SKIP, Cause.CANNOT_RUN, 125)


def test_a_timeout_kills_the_served_probe_and_its_group(checkout):
    t0 = time.perf_counter()
    reply, done = _train(checkout, 99, 1, timeout=8)
    assert reply is None and done.timed_out and time.perf_counter() - t0 < 30
    pid = int(next((checkout / "pids").iterdir()).name)
    assert live_members(pid, settle=5) == []
    assert _rows(checkout, 3)[0]["seen"] is None          # the server survived the kill


def test_a_dead_server_or_cold_mode_falls_back_to_a_fresh_interpreter(checkout, monkeypatch):
    _rows(checkout, 4)                                      # the private server is up
    server = client._Private.proc
    server.send_signal(signal.SIGKILL)
    server.wait()
    fallback = _rows(checkout, 4)                           # a new one, or a fresh interpreter
    assert fallback[0] == {"step": 0, "seen": None, "dynamo": False, "pgid_is_pid": True}
    monkeypatch.setenv("RLBISECT_COLD", "1")
    monkeypatch.setattr(client, "_in_server", lambda *a: pytest.fail("served in cold mode"))
    assert _rows(checkout, 4) == fallback


def test_a_server_refuses_what_it_preloaded_when_the_checkout_has_it_too(tmp_path):
    """The code under test comes from the checkout: a module the server already imported that the
    checkout also provides is a refusal (the probe then runs fresh), never the server's copy."""
    (tmp_path / "rlbisect").mkdir()
    (tmp_path / "rlbisect" / "__init__.py").write_text("raise SystemExit('the checkout copy')\n")
    path = client._Private.socket()
    assert path is not None
    done = client._in_server(path, INVARIANTS, ["--code-dir", str(tmp_path), "--reply", str(tmp_path / "r")],
                             tmp_path, 60, {})
    assert done is None                                      # refused: nothing ran there


def test_only_rlbisect_workers_are_served(tmp_path):
    path = client._Private.socket()
    assert client._in_server(path, "os", [], tmp_path, 60, {}) is None
    (tmp_path / "mod.py").write_text("import sys; print(sys.flags.isolated)")
    r = client.run_python("mod", [], tmp_path, 60)          # not a worker: a fresh `python -I -m mod`
    assert r.returncode == 1 and "No module named mod" in r.stderr   # -I: the folder is not on sys.path


def test_a_worker_that_dies_without_a_reply_is_a_skip_of_our_machinery(checkout):
    path = checkout / "reply.json"
    assert read_reply(path) is None
    path.write_text('{"verdict": "maybe"}')
    assert read_reply(path) is None
