"""`rlbisect promote`: the generated test passes on the current code and fails on faulted code (a
real copy of reference_trainer with the advantages negated, first on PYTHONPATH); files are never
overwritten without --force; the invariants that caught a bisected regression are asserted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import reference_trainer
from rlbisect.cli.app import app
from rlbisect.steps.promote import PromoteError, caught_by
from rlbisect.git.repo import CodeIdentity
from rlbisect.steps.format import load_snapshot, save_snapshot
from rlbisect.steps.spikes import Hit

DIRECTION = "update raises log pi where A > 0"
GOOD_VALUES = {"mask = policy tokens": 0.0, "sampler = trainer log-prob": 9.5e-07,
               "group advantage mean = 0": 2.98e-08, DIRECTION: 0.59, "KL to reference > 0 after a step": 0.012}


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("run")
    res = cli("train", "--steps", "1", "--seed", "0", "--snapshot-dir", str(d), "--snapshot-every", "1")
    assert res.exit_code == 0, res.output
    return d / "step-000000.pt"


def bisect_report(path: Path, reason: str = f"FAILED: {DIRECTION}", **bad_extra) -> Path:
    """A report as `rlbisect run --json` writes it (the keys promote reads)."""
    bad = {"commit": "b" * 40, "verdict": "bad", "values": dict(GOOD_VALUES, **{DIRECTION: -0.59}),
           "reason": reason, **bad_extra}
    doc = {"good": "a" * 40, "bad": "c" * 40, "first_bad": "b" * 40, "status": "found",
           "probes": [{"commit": "a" * 40, "verdict": "good", "values": GOOD_VALUES, "reason": "exit 0"}, bad]}
    path.write_text(json.dumps(doc))
    return path


def pytest_in(folder: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def faulted_copy(root: Path) -> Path:
    """reference_trainer with the GRPO advantages negated, in the code itself (no switch)."""
    shutil.copytree(Path(reference_trainer.__file__).parent, root / "reference_trainer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    losses = root / "reference_trainer" / "losses.py"
    src = losses.read_text()
    assert src.count("    return adv.flatten()") == 1
    losses.write_text(src.replace("    return adv.flatten()", "    return -adv.flatten()"))
    return root


@pytest.mark.slow
def test_generated_test_passes_on_current_code_and_fails_on_the_fault(snapshot, tmp_path):
    tests = tmp_path / "tests" / "regressions"
    refused = cli("promote", str(snapshot), "--to", str(tests))   # creates one folder level at most
    assert refused.exit_code == 2 and "folder" in refused.output and not tests.parent.exists()
    tests.parent.mkdir()
    res = cli("promote", str(snapshot), "--to", str(tests), "--report", str(bisect_report(tmp_path / "b.json")))
    assert res.exit_code == 0, res.output
    test_file, copy = tests / "test_replay_step_000000.py", tests / "snapshots" / "step-000000.pt"
    assert f"wrote {test_file}" in res.output and copy.read_bytes() == snapshot.read_bytes()
    assert f"wrote {tests / 'test_replay_step_000000.json'}" in res.output   # every file it wrote
    assert f"invariants: {DIRECTION} (named in the first bad probe's reason)" in res.output
    data = json.loads((tests / "test_replay_step_000000.json").read_text())
    assert data["tolerance"] == 0.0 and data["caught_by"] == [DIRECTION]
    assert data["expected"]["loss"] == load_snapshot(snapshot).stats["loss"]   # recorded, exactly

    passed = pytest_in(tests)
    assert passed.returncode == 0 and "2 passed" in passed.stdout, passed.stdout + passed.stderr

    failed = pytest_in(tests, pythonpath=faulted_copy(tmp_path / "faulted"))
    out = failed.stdout
    assert failed.returncode == 1 and "2 failed" in out, out + failed.stderr
    assert "DIFFERS" in out and "invariants failing again" in out and DIRECTION in out


def test_never_overwrites_without_force(snapshot, tmp_path):
    tests = tmp_path / "t"
    assert cli("promote", str(snapshot), "--to", str(tests)).exit_code == 0
    test_file = tests / "test_replay_step_000000.py"
    assert json.loads((tests / "test_replay_step_000000.json").read_text())["caught_by"] == []
    assert "def test_invariants" not in test_file.read_text()   # no report: the replay test alone
    test_file.write_text("# the user's own edits\n")
    res = cli("promote", str(snapshot), "--to", str(tests))
    assert res.exit_code == 2 and "already exist" in res.output and "--force" in res.output
    assert test_file.read_text() == "# the user's own edits\n"
    assert cli("promote", str(snapshot), "--to", str(tests), "--force").exit_code == 0
    assert "def test_replay_step_000000" in test_file.read_text()


def test_refusals_write_nothing(snapshot, tmp_path):
    tests = tmp_path / "t"
    bad = tmp_path / "step-000000.pt"
    bad.write_bytes(snapshot.read_bytes()[:-7])
    drifted = load_snapshot(snapshot)
    drifted.stats["loss"] += 1.0  # a recording the current code does not reproduce
    (tmp_path / "drifted").mkdir()
    drifted_path = save_snapshot(tmp_path / "drifted" / "step-000000.pt", drifted)
    no_find = tmp_path / "nofind.json"
    no_find.write_text(json.dumps({"first_bad": None, "probes": []}))
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "replay_my_loop.py"
    sys.path.insert(0, str(example.parent))
    try:
        import replay_my_loop
        own_step = replay_my_loop.train(str(tmp_path / "own"))[-1]
    finally:
        sys.path.remove(str(example.parent))
    for args, code, text in [
        ([str(bad)], 2, "truncated"),
        ([str(drifted_path)], 1, "does not replay on the current code (moved: loss)"),
        ([str(snapshot), "--report", str(no_find)], 2, "no first bad commit"),
        ([str(snapshot), "--report", str(tmp_path / "missing.json")], 2, "missing.json"),
        ([str(snapshot), "--invariant", "no such check"], 2, "unknown invariant"),
        # the documented own-loop adapter replays but has none of the checks' probe points: the test
        # it would write fails at once, so none is written
        ([str(own_step), "--invariant", DIRECTION, "--adapter", f"{example}:adapter"], 2,
         f"the invariants {DIRECTION} cannot run here"),
    ]:
        res = cli("promote", *args, "--to", str(tests))
        assert res.exit_code == code and text in res.output and res.output.count("\n") == 1, (args, res.output)
    assert not tests.exists()


def test_caught_by_prefers_the_reason_then_moved_values(tmp_path):
    def doc(**kw):
        return json.loads(bisect_report(tmp_path / "r.json", **kw).read_text())
    assert caught_by(doc())[0] == [DIRECTION]
    names, how = caught_by(doc(reason="exit 1"))
    assert names == [DIRECTION] and "moved" in how
    with pytest.raises(PromoteError):
        caught_by({"first_bad": "b" * 40, "probes": [{"commit": "b" * 40, "verdict": "good"}]})


HOSTILE = '"""\nimport pathlib; pathlib.Path("PWNED").write_text("ran")\n"""'


@pytest.mark.slow
def test_nothing_in_a_snapshot_becomes_code_in_the_generated_test(snapshot, tmp_path):
    """Every header field a snapshot carries, resealed with hostile text by the library's own save,
    reaches the test as data: the generated module's source never changes with it, and running the
    test runs none of it."""
    snap = load_snapshot(snapshot)
    snap.torch_version = snap.created = HOSTILE
    snap.config["note"] = snap.meta[HOSTILE] = HOSTILE
    snap.stats[HOSTILE] = 1.0
    snap.hits = [Hit(HOSTILE, HOSTILE, 0, 1.0, HOSTILE)]
    snap.code = CodeIdentity(HOSTILE, True, HOSTILE)
    (tmp_path / "hostile").mkdir()
    path = save_snapshot(tmp_path / "hostile" / "step-000000.pt", snap)
    tests = tmp_path / "t"
    res = cli("promote", str(path), "--to", str(tests), "--tolerance", "0")
    clean = tmp_path / "clean"
    assert cli("promote", str(snapshot), "--to", str(clean)).exit_code == 0
    if res.exit_code == 1:          # the hostile statistic no longer replays: refused, nothing written
        assert not (tests / "test_replay_step_000000.py").exists()
        snap.stats.pop(HOSTILE)
        path = save_snapshot(tmp_path / "hostile" / "step-000000.pt", snap)
        res = cli("promote", str(path), "--to", str(tests))
    assert res.exit_code == 0, res.output
    source = (tests / "test_replay_step_000000.py").read_text()
    assert source == (clean / "test_replay_step_000000.py").read_text() and "PWNED" not in source
    assert "PWNED" in (tests / "test_replay_step_000000.json").read_text()     # kept, as data
    ran = pytest_in(tests)
    assert ran.returncode == 0 and not (tests / "PWNED").exists() and not list(tmp_path.rglob("PWNED"))


def test_promote_to_a_file_is_one_line_and_exit_2(snapshot, tmp_path):
    (tmp_path / "afile").write_text("x")
    res = cli("promote", str(snapshot), "--to", str(tmp_path / "afile"))
    assert res.exit_code == 2 and "is a file" in res.output and res.output.count("\n") == 1


@pytest.mark.slow
def test_the_promoted_test_finds_its_files_from_any_folder(snapshot, tmp_path):
    tests = tmp_path / "repo" / "tests"
    tests.mkdir(parents=True)
    assert cli("promote", str(snapshot), "--to", str(tests)).exit_code == 0
    for where in (tmp_path, tests, tmp_path / "repo"):
        ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
                             cwd=where, capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, (where, ran.stdout + ran.stderr)


RUN_LEVEL = "sampler = trainer log-prob, every step"


def test_caught_by_takes_the_checks_that_failed_not_a_name_inside_another(tmp_path):
    """A run-level check's name holds a step-0 one's: the substring match recorded the step-0
    check, whose value had not moved, and the promoted test passed on the fault."""
    def doc(**kw):
        return json.loads(bisect_report(tmp_path / "r.json", **kw).read_text())
    evidence = {"checks": {"sampler = trainer log-prob": {"value": 1e-6, "passed": True},
                           RUN_LEVEL: {"value": 1.2, "passed": False}, DIRECTION: {"value": -0.5, "passed": False}}}
    names, how = caught_by(doc(reason=f"FAILED: {RUN_LEVEL}; {DIRECTION}", evidence=evidence))
    assert names == [DIRECTION] and "evidence" in how and RUN_LEVEL in how
    names, _ = caught_by(doc(reason=f"FAILED: {RUN_LEVEL}; {DIRECTION}"))      # no evidence: the reason, whole names
    assert names == [DIRECTION]
    only_run_level = {"checks": {"sampler = trainer log-prob": {"value": 1e-6, "passed": True},
                                 RUN_LEVEL: {"value": 1.2, "passed": False}}}
    for bad in (dict(reason=f"FAILED: {RUN_LEVEL}", evidence=only_run_level), dict(reason=f"FAILED: {RUN_LEVEL}")):
        with pytest.raises(PromoteError, match="would pass on the fault"):
            caught_by(doc(**bad))


def test_two_snapshots_of_one_step_number_are_kept_side_by_side(snapshot, tmp_path):
    """A loop counting steps per epoch saves step-000000.pt and step-000000-1.pt: the second was
    refused, and --force replaced the first test and its snapshot."""
    again = tmp_path / "step-000000-1.pt"
    shutil.copyfile(snapshot, again)
    tests = tmp_path / "t"
    for path in (snapshot, again):
        res = cli("promote", str(path), "--to", str(tests))
        assert res.exit_code == 0, res.output
    assert (tests / "snapshots" / "step-000000.pt").read_bytes() == snapshot.read_bytes()
    assert (tests / "snapshots" / "step-000000-1.pt").read_bytes() == again.read_bytes()
    second = (tests / "test_replay_step_000000_1.py").read_text()
    assert "def test_replay_step_000000_1():" in second and "test_replay_step_000000_1.json" in second
    assert json.loads((tests / "test_replay_step_000000_1.json").read_text())["snapshot"] == "snapshots/step-000000-1.pt"
    assert "def test_replay_step_000000():" in (tests / "test_replay_step_000000.py").read_text()


def test_a_negative_step_is_refused_not_written_as_a_test_that_does_not_compile(snapshot, tmp_path):
    snap = load_snapshot(snapshot)
    snap.step = -1
    (tmp_path / "forged").mkdir()
    path = save_snapshot(tmp_path / "forged" / "step-000000.pt", snap)
    res = cli("promote", str(path), "--to", str(tmp_path / "t"))
    assert res.exit_code == 2 and "step -1 is negative" in res.output, res.output
    assert not (tmp_path / "t").exists() or not list((tmp_path / "t").rglob("*.py"))
