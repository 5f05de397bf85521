"""``rlbisect check``'s exit contract and check selection: 0 pass, 1 a selected check fails or the
code under test raises, 2 bad input, 125 the checks cannot run on this code (git bisect run's skip)."""

import json
import subprocess

import pytest
from typer.testing import CliRunner

from rlbisect.check.results import CheckResult
from rlbisect.cli.app import app
from rlbisect.cli.check import _where

runner = CliRunner()

#: TinyAgent's adapter with one member replaced: ``{override}`` is the body of a subclass.
WRAPPED = """
from reference_trainer.adapter import make_adapter as _make
from rlbisect.errors import CannotRun


def make(**kw):
    base = _make(**kw)

    class Wrapped(type(base)):
{override}
    base.__class__ = Wrapped
    return base
"""


def _wrapped(tmp_path, override: str) -> str:
    """A new file each time: an adapter file is imported once per process."""
    path = tmp_path / f"wrapped{len(list(tmp_path.glob('wrapped*.py')))}.py"
    path.write_text(WRAPPED.format(override=override))
    return f"{path}:make"


def check(*args, env=None):
    return runner.invoke(app, ["check", *args], env=env)


def test_an_adapter_that_names_nothing_is_bad_input_by_hand(tmp_path, monkeypatch):
    monkeypatch.delenv("RLBISECT_PROBE", raising=False)
    monkeypatch.chdir(tmp_path)                       # not in a git repository: no bisect here
    for spec in (f"{tmp_path}/missing.py:make", "no_such_pkg.adapter:make", "nosuchname",
                 "reference_trainer.adapter:no_such_factory"):
        r = check("--adapter", spec)
        assert r.exit_code == 2, (spec, r.output)


def test_an_empty_adapter_spec_or_a_folder_is_refused_in_one_line(tmp_path, monkeypatch):
    """--adapter "" checked TinyAgent instead; ":" was exit 125 ("Empty module name")."""
    monkeypatch.delenv("RLBISECT_PROBE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trainer").mkdir()                    # no __init__.py: a namespace package
    for spec, said in (("", "--adapter is empty"), (" ", "--adapter is empty"), (":", "the module or file is empty"),
                       ("x.py:", "the factory is empty"), ("trainer:make", "adapter trainer is a folder"),
                       ("trainer/:make", "adapter trainer/ is a folder")):
        r = check("--adapter", spec, "--no-runs")
        assert r.exit_code == 2 and said in r.output and len(r.output.strip().splitlines()) == 1, (spec, r.output)


def test_inside_a_bisect_an_adapter_missing_at_this_commit_is_a_skip(tmp_path, monkeypatch):
    """rlbisect run's command predicate sets RLBISECT_PROBE; git bisect run leaves BISECT_START."""
    monkeypatch.chdir(tmp_path)
    r = check("--adapter", f"{tmp_path}/missing.py:make", env={"RLBISECT_PROBE": "abc"})
    assert r.exit_code == 125 and "cannot run the checks here" in r.output
    monkeypatch.delenv("RLBISECT_PROBE", raising=False)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("x\n")
    subprocess.run(["git", "add", "f"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "c"], cwd=tmp_path, check=True)
    assert check("--adapter", "missing.py:make").exit_code == 2          # no bisect yet
    subprocess.run(["git", "bisect", "start"], cwd=tmp_path, check=True, capture_output=True)
    r = check("--adapter", "missing.py:make")
    assert r.exit_code == 125, r.output


def test_an_adapter_that_does_not_fit_this_code_cannot_run(tmp_path):
    """Its import fails (the trainer it imports is not there), or it says so (CannotRun): 125,
    from the factory or from a probe point."""
    (tmp_path / "old.py").write_text("import trainer_of_the_future  # noqa\ndef make(**kw): pass\n")
    r = check("--adapter", f"{tmp_path}/old.py:make")
    assert r.exit_code == 125 and "trainer_of_the_future" in r.output
    r = check("--adapter", _wrapped(tmp_path, "        pass\n    raise CannotRun('no GRPOTrainer._private here')"))
    assert r.exit_code == 125 and "no GRPOTrainer._private here" in r.output
    spec = _wrapped(tmp_path, "        def pad(self, batch, extra):\n"
                              "            raise CannotRun('this trainer cannot pad')\n")
    r = check("--adapter", spec, "--no-runs")
    assert r.exit_code == 125 and "this trainer cannot pad" in r.output


def test_the_code_under_test_raising_fails_its_check_and_the_others_still_run(tmp_path):
    spec = _wrapped(tmp_path, "        def pad(self, batch, extra):\n"
                              "            raise ValueError('the padding code is broken\\nsecond line')\n")
    r = check("--adapter", spec, "--no-runs")
    assert r.exit_code == 1 and not isinstance(r.exception, ValueError), r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith("loss invariant to padding"))
    assert "FAIL  raised ValueError: the padding code is broken (in the adapter or the trainer" in line
    assert "second line" not in r.output and r.output.splitlines()[-1].startswith("FAILED: loss invariant to padding (")
    assert "update raises log pi where A > 0" in r.output       # the checks after it ran


def test_a_matrix_row_whose_code_raises_is_a_row_of_failures_not_the_end_of_the_matrix(tmp_path):
    path = tmp_path / "faulty.py"
    path.write_text("from reference_trainer.adapter import make_adapter as _make\n\n\n"
                    "def make(bug=None, **kw):\n    base = _make(**kw)\n\n"
                    "    class Wrapped(type(base)):\n        faults = ['prepare_raises']\n\n"
                    "        def prepare(self, model, batch):\n"
                    "            if bug:\n                raise RuntimeError('no grad_fn')\n"
                    "            return super().prepare(model, batch)\n"
                    "    base.__class__ = Wrapped\n    return base\n")
    r = check("--adapter", f"{path}:make", "--no-runs", "--matrix", "--jobs", "2", "--json", "--checks", "1,4,5")
    table = json.loads(r.output)
    assert r.exit_code == 0 and list(table) == ["none", "prepare_raises"], r.output
    assert all(c["passed"] for c in table["none"].values())
    assert all(c["passed"] is False and "RuntimeError: no grad_fn" in c["detail"] for c in table["prepare_raises"].values())


def test_checks_select_by_number_or_name_and_the_others_never_decide():
    r = check("--bug", "sign_flip", "--no-runs", "--checks", "1,6")
    assert r.exit_code == 0 and "all 2 selected checks passed" in r.output, r.output
    assert "mask = policy tokens" in r.output and "update raises" not in r.output
    r = check("--bug", "sign_flip", "--no-runs", "--checks", "8", "--json")
    assert r.exit_code == 1 and list(json.loads(r.output)) == ["update raises log pi where A > 0"]
    r = check("--bug", "sign_flip", "--no-runs", "--checks", "UPDATE raises log pi where A > 0", "--checks", "1")
    assert r.exit_code == 1 and "FAILED: update raises log pi where A > 0" in r.output


def test_an_unknown_check_is_bad_input_that_lists_the_checks():
    r = check("--checks", "1,nope", "--no-runs")
    assert r.exit_code == 2 and "no check named 'nope'" in r.output and "1 mask = policy tokens" in r.output
    assert check("--checks", "999").exit_code == 2
    r = check("--checks", "same seed, same rows", "--no-runs")
    assert r.exit_code == 2 and "--no-runs" in r.output


def test_run_level_checks_run_only_when_one_is_selected(monkeypatch, tmp_path):
    import rlbisect.check.run_level as run_level
    calls = tmp_path / "calls"        # the checks run in a child process: counted in a file

    def fake(adapter, seed=0):
        with open(calls, "a") as f:
            f.write("1")
        return run_level.Main({name: CheckResult(name, 0.0, True) for name in run_level.RUN_CHECKS})
    monkeypatch.setattr(run_level, "main_run", fake)
    monkeypatch.setattr(run_level, "quiet_run", lambda adapter, seed=0: [])
    monkeypatch.setattr(run_level, "variant_run", lambda adapter, seed=0: None)
    monkeypatch.setattr("rlbisect._proc.forked.usable_cores", lambda: 1)   # no further child for the runs
    assert check("--checks", "1").exit_code == 0 and not calls.exists()
    r = check("--checks", "1,evaluation: held-out tasks, weights untouched", "--json")
    assert r.exit_code == 0 and calls.read_text() == "1"
    assert list(json.loads(r.output)) == ["mask = policy tokens", "evaluation: held-out tasks, weights untouched"]


def test_a_failing_line_shows_its_setting_and_detail(tmp_path):
    assert _where(CheckResult("x", 0.31, False, setting="temperature 0.7", detail="off by 0.3")) == \
        '  at "temperature 0.7": off by 0.3'
    assert _where(CheckResult("x", 1.0, False, detail="off")) == "  off"
    assert _where(CheckResult("x", 1.0, False)) == ""
    spec = _wrapped(tmp_path, "        def train_run(self, steps, seed, eval_every, tap=None, settings=None):\n"
                              "            raise RuntimeError('the loop is broken')\n")
    r = check("--adapter", spec, "--checks", "short runs complete")
    line = next(ln for ln in r.output.splitlines() if ln.startswith("short runs complete"))
    assert r.exit_code == 1 and "FAIL" in line and line.endswith("the trainer's loop raised RuntimeError: the loop is broken")


def test_a_check_that_could_not_run_is_neither_a_pass_nor_a_failure():
    """Without a reference model checks 9 and 11 are n/a: counted as such, never as passes."""
    r = check("--kl-coef", "0", "--no-runs", "--checks", "9,11")
    assert r.exit_code == 125 and "none of the 2 selected checks could run (n/a)" in r.output, r.output
    assert "passed" not in r.output.splitlines()[-1]
    r = check("--kl-coef", "0", "--no-runs", "--checks", "9,11", "--json")
    assert r.exit_code == 125 and all(c["passed"] is None and c["na"] for c in json.loads(r.output).values())
    r = check("--kl-coef", "0", "--no-runs", "--checks", "1,9")
    assert r.exit_code == 0 and r.output.splitlines()[-1] == "1 of 2 selected checks passed, 1 could not run (n/a), none failed"
    r = check("--kl-coef", "0", "--no-runs", "--checks", "8,9", "--bug", "sign_flip")
    assert r.exit_code == 1 and r.output.splitlines()[-1] == \
        "FAILED: update raises log pi where A > 0 (0 passed, 1 failed, 1 could not run (n/a))"


def test_a_non_finite_kl_coef_is_bad_input_not_five_trainer_faults():
    r = check("--kl-coef", "inf", "--no-runs")
    assert r.exit_code == 2 and r.output.strip() == "rlbisect check: --kl-coef: Input should be a finite number", r.output


def test_an_adapter_that_exits_while_loading_is_an_adapter_failure_not_our_exit(tmp_path):
    (tmp_path / "exits.py").write_text("raise SystemExit(0)\n")
    r = check("--adapter", f"{tmp_path}/exits.py:make", "--no-runs")
    assert r.exit_code == 125 and r.output.strip().endswith("exits.py: it called sys.exit(0)"), r.output
    assert len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize("how,said", [("sys.exit(0)", "ended (sys.exit(0)) during them"),
                                      ("os._exit(0)", "ended (exit status 0) during them")])
def test_code_under_test_that_ends_the_process_is_no_pass(tmp_path, how, said):
    """It ended `rlbisect check` with exit 0 and nothing printed: a good commit to git bisect run."""
    spec = _wrapped(tmp_path, f"        def loss(self, *args, **kwargs):\n            import os, sys; {how}\n")
    r = check("--adapter", spec, "--no-runs")
    assert r.exit_code == 125 and said in r.output and "the checks ended without an answer" in r.output, r.output


def test_an_adapter_whose_module_starts_threads_is_checked(tmp_path):
    """Imported here and checked in a forked child, its thread pool's workers were missing there
    and the check hung for ever: the adapter's module is imported in the child alone."""
    (tmp_path / "pooled.py").write_text(
        "import concurrent.futures\nfrom reference_trainer.adapter import ReferenceAdapter\n"
        "POOL = concurrent.futures.ThreadPoolExecutor(2)\nlist(POOL.map(abs, [-1, -2, -3]))\n"
        "class A(ReferenceAdapter):\n    def probe_batch(self):\n        list(POOL.map(abs, [-4]))\n"
        "        return super().probe_batch()\ndef make_adapter(**kw):\n    return A(**kw)\n")
    r = check("--adapter", f"{tmp_path}/pooled.py:make_adapter", "--no-runs", "--checks", "1")
    assert r.exit_code == 0 and "mask = policy tokens" in r.output, r.output
    # a --matrix row, too: the command read the fault list in its own process, then forked the rows
    (tmp_path / "pooled.py").write_text((tmp_path / "pooled.py").read_text().replace(
        "class A(ReferenceAdapter):\n", "class A(ReferenceAdapter):\n    faults = ['mask_shift']\n"))
    r = check("--adapter", f"{tmp_path}/pooled.py:make_adapter", "--no-runs", "--checks", "1", "--matrix", "--json")
    rows = json.loads(r.output)
    assert r.exit_code == 0 and [c["passed"] for c in rows["mask_shift"].values()] == [False], r.output


@pytest.mark.slow
def test_a_check_stopped_by_a_timeout_leaves_no_process_behind(tmp_path):
    """The checks run in a child: a SIGTERM to `rlbisect check` (a bisect's timeout) ends it too."""
    import os
    import signal
    import sys
    import time
    pid_file = tmp_path / "pid"
    spec = _wrapped(tmp_path, f"        def loss(self, *args, **kwargs):\n            import os, time\n"
                              f"            open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)\n")
    cmd = subprocess.Popen([sys.executable, "-m", "rlbisect", "check", "--adapter", spec, "--no-runs"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    assert child != cmd.pid
    cmd.send_signal(signal.SIGTERM)
    cmd.wait(30)
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child running the checks outlived the command")


@pytest.mark.parametrize("opt,flag", [("bug=mask_shift", "--bug"), ("seed=3", "--seed or --probe-seeds"),
                                      ("kl_coef=0.2", "--kl-coef")])
def test_an_adapter_option_the_command_sets_itself_points_to_its_flag(opt, flag):
    """It reached the factory twice: a TypeError traceback, exit 1 (a finding, to a bisect)."""
    r = CliRunner().invoke(app, ["check", "--adapter-opt", opt, "--no-runs", "--checks", "1"])
    assert r.exit_code == 2 and f"is set by {flag}; give it there" in r.output and r.output.count("\n") == 1, r.output


@pytest.mark.parametrize("args", [["--seed", "99999999999999999999"], ["--probe-seeds", "1,99999999999999999999"],
                                  ["--seed=-9223372036854775809"]])
def test_a_seed_no_generator_can_take_is_bad_input_not_every_check_failing(args):
    """It raised in the trainer's seeding: every check FAILED, exit 1 (a bad commit, to a bisect)."""
    r = check(*args, "--no-runs", "--checks", "1")
    assert r.exit_code == 2 and "a seed must be from -2**63 to 2**64 - 1" in r.output, r.output
    assert r.output.count("\n") == 1


@pytest.mark.parametrize("args", [["--bug", ""], ["--bug", "nope"], ["--episodes", "3"], ["--adapter-opt", "foo=1"],
                                  ["--adapter-opt", "temperature=abc"], ["--adapter-opt", "temperature=0"],
                                  ["--adapter-opt", "max_turns=0"]])
def test_a_usage_mistake_is_bad_input_by_hand_not_a_skip(args, tmp_path, monkeypatch):
    """Each exited 125: under git bisect run, every commit skipped instead of the run stopping."""
    monkeypatch.delenv("RLBISECT_PROBE", raising=False)
    monkeypatch.chdir(tmp_path)                       # not in a git repository: no bisect here
    r = check(*args, "--no-runs", "--checks", "1")
    assert r.exit_code == 2 and "cannot run the checks here" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1


def test_an_unknown_fault_lists_every_name_and_is_a_skip_inside_a_bisect(tmp_path, monkeypatch):
    from reference_trainer.faults import BUGS
    monkeypatch.chdir(tmp_path)
    r = check("--bug", "nope", "--no-runs", env={"RLBISECT_PROBE": "abc"})
    assert r.exit_code == 125 and "cannot run the checks here" in r.output
    named = r.output.split("choose from")[1].replace(",", " ").split()
    assert [b for b in BUGS if b not in named] == []


def test_options_nobody_gave_never_make_a_factory_unbuildable(tmp_path, monkeypatch):
    """The default --episodes 64 and --kl-coef 0.1 (and probe seed 1) reached a factory with no
    options and exited 125; one set by hand that the factory lacks is bad input (125 in a bisect)."""
    monkeypatch.delenv("RLBISECT_PROBE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "own.py").write_text("from reference_trainer.adapter import ReferenceAdapter\n"
                                     "def bare():\n    return ReferenceAdapter()\n"
                                     "def nokl(episodes=64, seed=1, bug=None):\n"
                                     "    return ReferenceAdapter(episodes=episodes, seed=seed, bug=bug)\n")
    for spec in ("own.py:bare", "own.py:nokl"):
        r = check("--adapter", spec, "--no-runs", "--checks", "1")
        assert r.exit_code == 0, (spec, r.output)
    r = check("--adapter", "own.py:nokl", "--kl-coef", "0", "--no-runs", "--checks", "1")
    assert r.exit_code == 2 and "does not accept option 'kl_coef'" in r.output, r.output
    r = check("--adapter", "own.py:nokl", "--kl-coef", "0", "--no-runs", env={"RLBISECT_PROBE": "abc"})
    assert r.exit_code == 125 and "cannot run the checks here" in r.output, r.output


def test_matrix_with_a_bug_is_refused_not_silently_dropped():
    r = check("--matrix", "--bug", "sign_flip", "--no-runs", "--checks", "8")
    assert r.exit_code == 2 and "--matrix checks every fault the adapter lists" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1


def test_the_trainer_raising_while_it_builds_its_starting_policy_is_a_finding_not_a_skip(monkeypatch):
    """An environment that raised while the scripted demonstrations were played (the starting
    policy is behaviour-cloned from them) ended the check with exit 125: a skip, to a bisect."""
    import reference_trainer.adapter as tinyagent

    def broken(tok):
        raise IndexError("Cannot choose from an empty sequence")
    monkeypatch.setattr(tinyagent, "make_base", broken)
    r = check("--no-runs", "--checks", "1,2")
    assert r.exit_code == 1 and r.output.count("raised IndexError: Cannot choose from an empty sequence") == 2, \
        r.output
