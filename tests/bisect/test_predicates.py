"""Predicates: git's exit-code rule, timeouts, process groups, identities, the registry."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from rlbisect import __version__
from rlbisect.bisect import BisectOptions, bisect
from rlbisect.bisect import predicates as P
from rlbisect._proc.runner import run as run_command
from rlbisect.bisect.predicates.command import CommandPredicate


@pytest.mark.parametrize("code,verdict", [(0, "good"), (1, "bad"), (124, "bad"), (125, "skip"),
                                          (126, "bad"), (127, "bad"), (128, "abort"),
                                          (255, "abort")])
def test_exit_codes_follow_git_bisect_run(tmp_path, code, verdict):
    probe = CommandPredicate(["sh", "-c", f"exit {code}"]).probe(tmp_path, "c", None)
    assert probe.verdict == verdict and probe.values == {"exit_code": code}
    assert probe.cacheable == (verdict != "abort")       # an abort says nothing about this tree
    assert probe.confirm_on_good == (code in (126, 127))


def test_death_by_signal_aborts(tmp_path):
    probe = CommandPredicate(["sh", "-c", "kill -9 $$"]).probe(tmp_path, "c", None)
    assert probe.verdict == "abort" and probe.values["exit_code"] == 128 + 9
    assert "SIGKILL" in probe.reason


def test_missing_or_non_executable_command_gets_the_shells_codes(tmp_path):
    missing = CommandPredicate(["./no-such-script"]).probe(tmp_path, "c", None)
    assert missing.verdict == "bad" and missing.values["exit_code"] == 127
    script = tmp_path / "not-executable.sh"
    script.write_text("exit 0\n")
    noexec = CommandPredicate([str(script)]).probe(tmp_path, "c", None)
    assert noexec.values["exit_code"] == 126 and noexec.confirm_on_good


def test_command_runs_in_the_worktree_with_our_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBISECT_TEST_VAR", "hello")
    probe = CommandPredicate(["sh", "-c", 'test "$RLBISECT_TEST_VAR" = hello && pwd']) \
        .probe(tmp_path, "c", None)
    assert probe.verdict == "good" and probe.output == str(tmp_path)


def test_timeout_is_a_skip_that_is_not_cached_and_kills_the_group(tmp_path):
    pidfile = tmp_path / "pid"
    cmd = ["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"]
    t0 = time.perf_counter()
    probe = CommandPredicate(cmd).probe(tmp_path, "c", 0.5)
    assert time.perf_counter() - t0 < 5
    assert probe.verdict == "skip" and not probe.cacheable and "timed out" in probe.reason
    child = int(pidfile.read_text())
    assert not _alive(child)


def test_background_processes_left_by_a_probe_are_killed(tmp_path):
    pidfile = tmp_path / "pid"
    probe = CommandPredicate(["sh", "-c", f"sleep 30 & echo $! > {pidfile}"]).probe(
        tmp_path, "c", None)
    assert probe.verdict == "good"
    assert not _alive(int(pidfile.read_text()))


def _alive(pid: int, settle: float = 2.0) -> bool:
    """Still running (not a zombie: PID 1 here may not reap orphans) after up to ``settle`` s.

    A SIGKILLed process takes a moment to die, so only one that outlives ``settle`` counts.
    """
    deadline = time.monotonic() + settle
    while True:
        try:
            running = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):   # gone (or going) while we looked
            running = False
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.02)


def test_identity_names_kind_argv_files_and_version(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ident = json.loads(CommandPredicate(["no-such-tool-here", "test"]).identity())
    assert ident == {"kind": "command", "argv": ["no-such-tool-here", "test"], "files": {},
                     "rlbisect": __version__}
    assert CommandPredicate(["make", "test"]).identity() == CommandPredicate(
        ["make", "test"]).identity()
    assert CommandPredicate(["make"]).identity() != CommandPredicate(["make", "x"]).identity()


def test_make_predicate_rules():
    assert isinstance(P.make_predicate(None, ["true"]), CommandPredicate)
    assert isinstance(P.make_predicate("command", ["true"]), CommandPredicate)
    with pytest.raises(P.PredicateError, match="needs a command"):
        P.make_predicate("command")
    with pytest.raises(P.PredicateError, match=r"unknown predicate 'nope' \(known: .*command"):
        P.make_predicate("nope")
    with pytest.raises(P.PredicateError, match="takes no option --adapter"):
        P.make_predicate(None, ["true"], options={"adapter": "x:y"})
    with pytest.raises(P.PredicateError, match="takes no option --metric.*--adapter"):
        P.make_predicate("invariants", options={"metric": "reward"})
    with pytest.raises(P.PredicateError, match="--steps"):
        P.make_predicate("short-run", options={"steps": 0})
    assert P.make_predicate("short-run", options={"steps": 4, "metric": None}).options.steps == 4


def test_default_predicate_when_unregistered_is_a_clear_error(monkeypatch):
    P.PREDICATES.names()
    monkeypatch.setattr(P.PREDICATES, "_entries", {k: v for k, v in P.PREDICATES._entries.items()
                                                   if k != "invariants"})
    with pytest.raises(P.PredicateError, match="unknown predicate 'invariants'.*-- CMD ARGS"):
        P.make_predicate()


class FileContainsPredicate(P.BasePredicate):
    """A registered python-level predicate: bad when the file holds a given word."""

    def __init__(self, spec: P.PredicateSpec):
        self.word = spec.arg or "bad"

    def identity(self) -> str:
        return json.dumps({"kind": "contains", "word": self.word})

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> P.Probe:
        r = run_command(["grep", "-qx", self.word, "state"], worktree, timeout)
        return P.Probe("bad" if r.returncode == 0 else "good", {"found": float(r.returncode == 0)},
                       seconds=r.seconds)


def test_a_registered_predicate_plugs_into_the_bisect(tiny_repo, monkeypatch):
    P.PREDICATES.names()
    monkeypatch.setattr(P.PREDICATES, "_entries", dict(P.PREDICATES._entries))
    monkeypatch.setattr(P, "DEFAULT_PREDICATE", "contains")
    P.PREDICATES.register("contains", P.Kind(FileContainsPredicate, P.Options, "state file holds WORD", "arg"))
    assert "contains" in P.known_predicates()
    r = tiny_repo(["ok", "ok", "ok", "broken", "broken"])
    result = bisect(r.path, "main~4..main", P.make_predicate(name="contains:broken"),
                    BisectOptions(use_cache=False))
    assert result.status == "found" and result.first_bad == r.shas[3]
    assert all("found" in p.values for p in result.probes)
    assert isinstance(P.make_predicate(), FileContainsPredicate)  # it is the default now


def test_run_command_reports_stdout_for_json_predicates(tmp_path):
    r = run_command([sys.executable, "-c", "import json; print(json.dumps({'x': 1}))"], tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout) == {"x": 1}
    assert not r.timed_out and not r.interrupted and r.seconds > 0


def test_identity_follows_the_content_of_the_files_the_command_names(tmp_path, monkeypatch):
    """An edited predicate script is a different predicate: its cached verdicts must not return."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "check.sh"
    script.write_text("exit 0\n")
    before = CommandPredicate(["sh", str(script)]).identity()
    relative = json.loads(CommandPredicate(["sh", "check.sh"]).identity())["files"]["check.sh"]
    assert relative == json.loads(before)["files"][str(script)]   # relative to where you run it
    script.write_text("exit 1\n")
    assert CommandPredicate(["sh", str(script)]).identity() != before
    # the executable itself counts too (found on PATH)
    assert "sh" in json.loads(before)["files"]


def test_the_paths_an_output_names_that_only_your_working_tree_has(tiny_repo):
    from rlbisect.bisect.predicates.command import uncommitted_named
    from rlbisect.git.repo import Repo
    r = tiny_repo(["good", "bad"])
    (r.path / "data").mkdir()
    (r.path / "data" / "x.csv").write_text("1\n")
    output = ("FileNotFoundError: [Errno 2] No such file or directory: '/tmp/rlbisect-7-ab/probe0-0/data/x.csv'\n"
              "cat: state: read twice; ERROR: tests/missing.py not found; see /usr/lib/python3/os.py")
    repo = Repo.open(r.path)
    assert uncommitted_named(repo, r.shas[0], output) == ["data/x.csv"]   # a checkout's path, read from its top
    assert uncommitted_named(repo, r.shas[0], "cat: x.csv", "data") == ["data/x.csv"]   # run from data/
    assert uncommitted_named(repo, r.shas[0], "no path here: state n") == []
