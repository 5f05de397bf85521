"""The invariants predicate with --checks: only the selected checks decide a commit, an unknown
one is refused before any probe, and an adapter that cannot run on a commit is a skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlbisect.bisect.predicates.invariants import (TINYAGENT_ADAPTER, InvariantsOptions, InvariantsPredicate,
                                                   main, select_checks)
from rlbisect.errors import Cause, InputError, Verdict
from rlbisect._proc.worker import read_reply

ROOT = Path(__file__).resolve().parents[2]     # its reference_trainer is the code under test


def test_numbers_and_names_give_names_in_report_order():
    assert select_checks(["6,1"]) == select_checks(["accumulated = one-pass gradient", "MASK = policy tokens"]) == \
        ["mask = policy tokens", "accumulated = one-pass gradient"]
    assert select_checks(["sampler = trainer log-prob, every step,1"]) == \
        ["mask = policy tokens", "sampler = trainer log-prob, every step"]
    for bad in (["0"], ["nope"], [","]):
        with pytest.raises(InputError):
            select_checks(bad)


def test_the_selection_is_in_the_identity_and_the_workers_arguments():
    some = InvariantsPredicate(InvariantsOptions(checks=["mask = policy tokens"]))
    assert some.identity() != InvariantsPredicate(InvariantsOptions()).identity()
    assert some.args()[-2:] == ["--check", "mask = policy tokens"]


class _Tree:
    """A repository whose BAD has, or lacks, every file."""

    def __init__(self, has: bool):
        self.has, self.root = has, Path("/nonexistent-repository")

    def has_file(self, commit: str, path: str) -> bool:
        return self.has


def test_preflight_refuses_unknown_checks_and_run_level_ones_without_runs():
    with pytest.raises(InputError, match="no check named 'nope'"):
        InvariantsPredicate(InvariantsOptions(checks=["nope"])).preflight(_Tree(True), "c")
    with pytest.raises(InputError, match="--no-runs"):
        InvariantsPredicate(InvariantsOptions(checks=["same seed, same rows"], runs=False)).preflight(_Tree(True), "c")


def test_preflight_refuses_the_default_checks_where_bad_has_no_tinyagent():
    from rlbisect.check.loading import DEFAULT_ADAPTER
    assert TINYAGENT_ADAPTER == DEFAULT_ADAPTER.partition(":")[0].replace(".", "/") + ".py"
    with pytest.raises(InputError, match=r"reference_trainer/adapter.py.*--adapter FILE.py:NAME.*after --"):
        InvariantsPredicate(InvariantsOptions()).preflight(_Tree(False), "c")
    InvariantsPredicate(InvariantsOptions()).preflight(_Tree(True), "c")                  # TinyAgent's own
    InvariantsPredicate(InvariantsOptions(adapter="rlbisect.frameworks.trl:demo")).preflight(_Tree(False), "c")


def test_run_without_a_command_in_a_repository_without_tinyagent_is_refused_before_any_probe(tiny_repo, run_cli):
    r = tiny_repo(["good", "bad"])
    before = r.snapshot()
    code, out, data = run_cli(["main~1..main", "--repo", str(r.path)])
    assert code == 2 and "has none: name your trainer's adapter" in out and data is None
    assert r.snapshot() == before


def test_run_refuses_an_unknown_check_before_any_probe(tiny_repo, run_cli):
    r = tiny_repo(["good", "bad"])
    code, out, data = run_cli(["main~1..main", "--repo", str(r.path), "--checks", "1,nope"])
    assert code == 2 and "no check named 'nope'" in out and data is None


def _probe(tmp_path, *args: str) -> tuple[int, dict]:
    reply = tmp_path / "reply.json"
    code = main([*args, "--no-runs", "--code-dir", str(ROOT), "--reply", str(reply)])
    got = read_reply(reply)
    assert got is not None
    return code, got.__dict__


def test_only_the_selected_checks_decide_a_probe(tmp_path):
    code, reply = _probe(tmp_path, "--adapter-opt", "bug=sign_flip", "--check", "1,6")
    assert code == 0 and reply["verdict"] is Verdict.GOOD
    assert list(reply["detail"]["checks"]) == ["mask = policy tokens", "accumulated = one-pass gradient"]
    code, reply = _probe(tmp_path, "--adapter-opt", "bug=sign_flip", "--check", "8")
    assert code == 1 and reply["reason"] == "FAILED: update raises log pi where A > 0"


def test_an_adapter_that_says_it_cannot_run_here_is_a_skip(tmp_path):
    (tmp_path / "cannot.py").write_text(
        "from reference_trainer.adapter import make_adapter\nfrom rlbisect.errors import CannotRun\n"
        "def make(**kw):\n    a = make_adapter(**kw)\n"
        "    def pad(batch, extra):\n        raise CannotRun('no padding API at this commit')\n"
        "    a.pad = pad\n    return a\n")
    code, reply = _probe(tmp_path, "--adapter", f"{tmp_path}/cannot.py:make")
    assert code == 125 and reply["cause"] is Cause.CANNOT_RUN and "no padding API" in reply["reason"]
    assert json.dumps(reply["detail"]) == "{}"


def test_a_probe_whose_selected_checks_all_could_not_run_is_a_skip_not_good(tmp_path):
    """Without a reference model checks 9 and 11 are n/a: nothing judged this commit."""
    code, reply = _probe(tmp_path, "--kl-coef", "0", "--check", "9,11")
    assert code == 125 and reply["verdict"] is Verdict.SKIP and reply["cause"] is Cause.CANNOT_RUN
    code, reply = _probe(tmp_path, "--kl-coef", "0", "--check", "1,9")
    assert code == 0 and reply["verdict"] is Verdict.GOOD
