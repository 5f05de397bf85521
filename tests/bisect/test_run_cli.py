"""`rlbisect run` in-process: git's own bisect scenarios (t6030) re-expressed, exit codes, files."""

from __future__ import annotations

import subprocess

import pytest

from helpers import git

KEYS = {"good", "bad", "first_bad", "candidates", "n_probes", "probes", "bisect_log"}


def test_finds_the_first_bad_commit_and_writes_every_output(tiny_repo, run_cli, state_cmd,
                                                             tmp_path):
    r = tiny_repo(["good"] * 5 + ["bad"] * 4)
    before = r.snapshot()
    md, png = tmp_path / "report.md", tmp_path / "figures" / "timeline.png"
    png.parent.mkdir()
    code, out, data = run_cli(["main~8..main", "--repo", str(r.path), "--report", str(md),
                               "--plot", str(png), "--", *state_cmd])
    assert code == 0, out
    assert KEYS <= set(data)
    assert data["first_bad"] == r.shas[5] and data["candidates"] == [r.shas[5]]
    assert data["good"] == r.shas[0] and data["bad"] == r.shas[8]
    assert data["n_probes"] == 3  # ceil(log2(8))
    # a quick predicate is verified by default: the culprit and its parent three more times each
    assert data["n_verify"] == 6 and len(data["probes"]) == 9 and "and 6 verification runs" in out
    assert {(p["commit"], p["verdict"]) for p in data["probes"][3:]} == {(r.shas[5], "bad"), (r.shas[4], "good")}
    assert {"commit", "verdict", "seconds", "values"} <= set(data["probes"][0])
    assert data["probes"][0]["values"] == {"exit_code": 0.0 if data["probes"][0]["verdict"] ==
                                           "good" else 1.0}
    assert f"{r.shas[5]} is the first bad commit" in out and "c5 bad" in out
    assert f"# first bad commit: [{r.shas[5]}]" in data["bisect_log"]
    assert "First bad commit" in md.read_text() and "git bisect log" in md.read_text()
    assert "](figures/timeline.png)" in md.read_text()   # linked from the report's folder
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert r.snapshot() == before


def test_only_skipped_commits_left_lists_every_candidate(tiny_repo, run_cli, state_cmd):
    r = tiny_repo(["good", "good", "skip", "skip", "skip", "bad", "bad"])
    code, out, data = run_cli(["main~6..main", "--repo", str(r.path), "--", *state_cmd])
    assert code == 3
    assert data["first_bad"] is None
    assert set(data["candidates"]) == {r.shas[2], r.shas[3], r.shas[4], r.shas[5]}
    assert "could be any of" in out and all(s in out for s in data["candidates"])
    assert "# only skipped commits left to test" in data["bisect_log"]


@pytest.mark.parametrize("args,needle", [
    (["nosuch..main", "--", "true"], "unknown revision 'nosuch'"),
    (["main..main~3", "--", "true"], "did you swap them?"),
    (["main..main", "--", "true"], "empty range"),
    (["main", "--", "true"], "expected GOOD..BAD"),
    (["main~3..main", "--predicate", "nope"], "unknown predicate 'nope' (known: command"),
    (["main~3..main", "--predicate", "command"], "needs a command"),
    (["main~3..main", "--timeout", "0", "--", "true"], "--timeout: Input should be greater than 0"),
    (["main~3..main", "--confidence", "0.9", "--", "true"], "--confidence needs --flaky"),
    (["main~3..main", "--report", "/no/such/dir/x.md", "--", "true"], "folder /no/such/dir does not exist"),
    (["main~3..main", "--plot", "/", "--", "true"], "is a directory"),
    (["main~3..main", "--plot", "t.txt", "--", "true"], "--plot t.txt: a figure needs one of the extensions .png"),
    (["main~3..main", "--adapter", "/no/such/adapter.py:make"], "no such file /no/such/adapter.py"),
    (["main~3..main", "--per-commit", "--", "true"], "--per-commit keeps short runs with a --metric"),
    (["main~3..main", "--report", "same.png", "--plot", "same.png", "--", "true"],
     "--report and --plot name the same file same.png"),
    (["main~3..main", "--metric", "reward", "--", "true"], "the command predicate takes no option --metric"),
    # repeats of a short run without a metric train the same seeds: not new evidence for --flaky
    (["main~3..main", "--flaky", "--predicate", "short-run", "--", "t", "{seed}", "{out}"], "--flaky with short runs needs --metric M"),
    (["main~3..main", "--flaky", "--confirm-endpoints", "--", "true"], "--confirm-endpoints is for a deterministic"),
])
def test_bad_input_exits_2_with_one_line_and_changes_nothing(tiny_repo, run_cli, args, needle):
    r = tiny_repo(["good", "good", "bad", "bad"])
    before = r.snapshot()
    code, out, data = run_cli(["--repo", str(r.path), *args])
    assert code == 2 and data is None
    assert needle in out and len(out.strip().splitlines()) == 1 and "Traceback" not in out
    assert r.snapshot() == before
    assert not (r.path / ".git" / "rlbisect").exists()


def test_not_a_git_repository_exits_2(tmp_path, run_cli):
    code, out, _ = run_cli(["a..b", "--repo", str(tmp_path), "--", "true"])
    assert code == 2 and "not a git repository" in out


def test_exit_125_skips_like_git(tiny_repo, run_cli, state_cmd):
    r = tiny_repo(["good", "good", "good", "skip", "good", "bad", "bad"])
    code, _, data = run_cli(["main~6..main", "--repo", str(r.path), "--", *state_cmd])
    assert code == 0 and data["first_bad"] == r.shas[5]
    assert [p["verdict"] for p in data["probes"] if p["commit"] == r.shas[3]] == ["skip"]
    assert f"git bisect skip {r.shas[3]}" in data["bisect_log"]


@pytest.mark.parametrize("code", [126, 127])
def test_exit_126_and_127_are_bad_when_good_answers_differently(tiny_repo, run_cli, state_cmd,
                                                               code):
    # t6030 "bisect run accepts exit code 126/127 as bad"
    r = tiny_repo(["good", "good", "good", str(code), str(code), str(code)])
    rc, out, data = run_cli(["main~5..main", "--repo", str(r.path), "--", *state_cmd])
    assert rc == 0 and data["first_bad"] == r.shas[3], out


def test_a_command_that_cannot_run_aborts_instead_of_blaming_a_commit(tiny_repo, run_cli):
    # t6030 "bisect run fails with non-executable test script": 126/127 on GOOD too.
    r = tiny_repo(["good", "good", "bad", "bad"])
    before = r.snapshot()
    rc, out, data = run_cli(["main~3..main", "--repo", str(r.path), "--", "./missing.sh"])
    assert rc == 4 and "bogus exit code 127 on GOOD too" in out
    assert data["first_bad"] is None and data["status"] == "aborted"
    assert r.snapshot() == before
    # nothing in the range was judged: no list of every commit as "still one of", no prior as a posterior
    assert "nothing was learned about the range" in out and "still one of" not in out, out
    rc, out, data = run_cli(["main~3..main", "--repo", str(r.path), "--flaky", "--", "./missing.sh"])
    assert rc == 4 and "nothing was learned" in out and "posterior of the likeliest" not in out, out
    assert "2 probes (0 cached)" in out and "0 predicate runs" not in out, out


@pytest.mark.parametrize("code", [128, 255])
def test_exit_128_and_above_abort(tiny_repo, run_cli, state_cmd, code):
    r = tiny_repo(["good"] + [str(code)] * 5)
    before = r.snapshot()
    rc, out, data = run_cli(["main~5..main", "--repo", str(r.path), "--", *state_cmd])
    assert rc == 4 and f"exit {code}" in out and "abort" in out
    assert data["status"] == "aborted" and data["first_bad"] is None
    assert data["probes"][-1]["verdict"] == "abort"
    assert r.snapshot() == before


def test_timeout_is_skip_never_bad(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good", "good", "bad", "bad", "bad"])
    cmd = ["sh", "-c", 'test "$(cat n)" = 2 && sleep 30; test "$(cat state)" = good']
    rc, out, data = run_cli(["main~4..main", "--repo", str(r.path), "--timeout", "0.5",
                             "--", *cmd])
    timed = [p for p in data["probes"] if "timed out" in p["reason"]]
    assert timed and all(p["verdict"] == "skip" for p in timed)
    assert rc == 3 and set(data["candidates"]) == {r.shas[2], r.shas[3]}


def test_first_parent_names_the_merge_on_the_mainline(tiny_repo, run_cli, state_cmd):
    # t6030 "bisect start --first-parent": the side branch broke it; the merge brought it in.
    #   c0 - c1 ------ c4(merge) - c5      c2 - c3 on the side branch off c0
    r = tiny_repo(["good", "good", "good", "bad", "bad", "bad"],
                  parents=[[], [0], [0], [2], [1, 3], [4]])
    rc, _, fp = run_cli(["main~2..main", "--repo", str(r.path), "--first-parent",
                         "--no-cache", "--", *state_cmd])
    assert rc == 0 and fp["first_bad"] == r.shas[4]
    assert all(p["commit"] not in (r.shas[2], r.shas[3]) for p in fp["probes"])
    rc, _, full = run_cli([f"{r.shas[0]}..main", "--repo", str(r.path), "--no-cache",
                           "--", *state_cmd])
    assert rc == 0 and full["first_bad"] == r.shas[3]


def test_the_captured_log_replays_to_the_same_result(tiny_repo, run_cli, state_cmd, tmp_path):
    r = tiny_repo(["good", "good", "skip", "good", "bad", "bad", "bad", "bad"])
    _, _, data = run_cli(["main~7..main", "--repo", str(r.path), "--", *state_cmd])
    log = tmp_path / "bisect.log"
    log.write_text(data["bisect_log"])
    clone = tmp_path / "clone"
    git(r.path, "clone", "-q", str(r.path), str(clone))
    out = subprocess.run(["git", "bisect", "replay", str(log)], cwd=clone, capture_output=True,
                         text=True)
    assert f"{data['first_bad']} is the first bad commit" in out.stdout
    assert data["first_bad"] == r.shas[4]


def test_range_of_one_commit_rests_on_both_endpoints_so_both_are_probed(tiny_repo, run_cli,
                                                                        state_cmd):
    r = tiny_repo(["good", "bad"])
    rc, out, data = run_cli(["main~1..main", "--repo", str(r.path), "--", *state_cmd])
    assert rc == 0 and data["first_bad"] == r.shas[1], out
    assert [(p["role"], p["verdict"]) for p in data["probes"]] == [("GOOD", "good"), ("BAD", "bad")] + \
        [("verify", "bad"), ("verify", "good")] * 3


def test_a_bisect_in_progress_in_the_users_worktree_is_left_alone(tiny_repo, run_cli, state_cmd):
    r = tiny_repo(["good", "good", "good", "bad", "bad", "bad"])
    r.git("bisect", "start", "--no-checkout", "main", "main~5")
    users_log = r.git("bisect", "log")
    before = r.snapshot()
    code, _, data = run_cli(["main~5..main", "--repo", str(r.path), "--", *state_cmd])
    assert code == 0 and data["first_bad"] == r.shas[3]
    assert r.snapshot() == before and r.git("bisect", "log") == users_log


def test_help_is_the_docstring_with_an_example():
    from typer.testing import CliRunner

    from rlbisect.cli.app import app
    out = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    assert "Example: rlbisect run" in out and "--first-parent" in out and "125 skip" in out


def test_a_range_where_every_commit_passes_names_no_culprit(tiny_repo, run_cli):
    """`-- true` over healthy commits: git would blame BAD; rlbisect probes BAD and refuses."""
    r = tiny_repo(["good"] * 6)
    before = r.snapshot()
    code, out, data = run_cli(["main~5..main", "--repo", str(r.path), "--", "true"])
    assert code == 5 and data["status"] == "bad_passes" and data["first_bad"] is None, out
    assert "is the first bad commit" not in out and "BAD passes the predicate" in out
    assert data["probes"][-1]["role"] == "BAD" and data["probes"][-1]["verdict"] == "good"
    searched = [p for p in data["probes"] if not p["role"]]
    assert len(searched) <= 3 and data["n_probes"] == len(searched) + 1   # + BAD, which it rested on
    assert r.snapshot() == before


def test_a_predicate_broken_everywhere_is_shown_not_blamed_on_a_commit(tiny_repo, run_cli):
    r = tiny_repo(["good", "good", "bad", "bad", "bad"])
    cmd = ["sh", "-c", "echo 'ERROR: file or directory not found: tests/missing.py' >&2; exit 4"]
    code, out, data = run_cli(["main~4..main", "--repo", str(r.path), "--", *cmd])
    assert code == 6 and data["status"] == "good_fails" and data["first_bad"] is None, out
    assert "GOOD fails the predicate, as every probe did" in out
    assert "ERROR: file or directory not found: tests/missing.py" in out       # the terminal
    assert all("tests/missing.py" in p["output"] for p in data["probes"])      # and the JSON
    assert "in your working tree but not in the commits" not in out   # not in yours either


def test_a_file_only_in_your_working_tree_that_good_s_output_names_is_pointed_out(tiny_repo, run_cli):
    """git bisect checks out in place and keeps untracked and ignored files (a dataset, a local
    config); a probe's clean checkout has none: the answer says which one GOOD's output named."""
    r = tiny_repo(["good", "good", "bad", "bad"])
    (r.path / "data").mkdir()
    (r.path / "data" / "threshold").write_text("5\n")
    cmd = ["sh", "-c", 'cat data/threshold state n && case "$(cat state)" in good) exit 0;; *) exit 1;; esac']
    code, out, data = run_cli(["main~3..main", "--repo", str(r.path), "--", *cmd])
    assert code == 6 and data["status"] == "good_fails", out
    assert "its output names data/threshold, in your working tree but not in the commits" in data["message"]


def test_the_first_failing_probe_shows_its_output(tiny_repo, run_cli):
    r = tiny_repo(["good", "good", "good", "bad", "bad", "bad", "bad", "bad"])
    cmd = ["sh", "-c", 'if [ "$(cat state)" = bad ]; then echo "assert 0.3 < 0.1 (state=bad)"; '
                       "exit 1; fi"]
    code, out, data = run_cli(["main~7..main", "--repo", str(r.path), "--", *cmd])
    assert code == 0 and data["first_bad"] == r.shas[3]
    assert out.count("| assert 0.3 < 0.1 (state=bad)") == 1   # once, under the first bad probe


def test_confirm_endpoints_probes_both_first(tiny_repo, run_cli, state_cmd):
    r = tiny_repo(["good"] * 3 + ["bad"] * 6)
    code, out, data = run_cli(["main~8..main", "--repo", str(r.path), "--confirm-endpoints",
                               "--", *state_cmd])
    assert code == 0 and data["first_bad"] == r.shas[3]
    assert [p["role"] for p in data["probes"][:2]] == ["GOOD", "BAD"]
    assert data["n_probes"] == 2 + 3


def test_a_script_in_your_folder_but_not_in_the_commits_is_refused_before_any_probe(
        tiny_repo, run_cli, tmp_path, monkeypatch):
    r = tiny_repo(["good", "good", "bad", "bad"])
    monkeypatch.chdir(r.path)
    (r.path / "check.sh").write_text('test "$(cat state)" = good\n')   # untracked
    code, out, data = run_cli(["main~3..main", "--", "sh", "check.sh"])
    assert code == 2 and data is None and len(out.strip().splitlines()) == 1
    assert "check.sh (the command) is in your folder but not in the commits" in out
    assert str(r.path / "check.sh") in out                              # what to write instead
    code, out, data = run_cli(["main~3..main", "--", "sh", str(r.path / "check.sh")])
    assert code == 0 and data["first_bad"] == r.shas[2]


@pytest.mark.slow
def test_probes_that_all_skip_for_one_reason_stop_early_and_say_it(tiny_repo, run_cli):
    r = tiny_repo(["good"] * 10 + ["bad"] * 22)
    code, out, data = run_cli(["main~31..main", "--repo", str(r.path), "--predicate", "invariants",
                               "--adapter", "no_such_trainer.adapter:make_adapter"])
    assert code == 3 and data["n_probes"] == 3 and data["first_bad"] is None, out
    assert "the first 3 probes were all skipped: invariants: cannot import no_such_trainer" in out
    assert "no_such_trainer" in out


def test_a_predicates_output_cannot_break_out_of_the_reports_code_block(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good", "good", "bad", "bad"])
    md = tmp_path / "r.md"
    cmd = ["sh", "-c", 'printf "\\140\\140\\140\\n# Injected heading\\n"; test "$(cat state)" = good']
    code, out, _ = run_cli(["main~3..main", "--repo", str(r.path), "--no-cache", "--report", str(md), "--", *cmd])
    assert code == 0, out
    lines = md.read_text().splitlines()
    at = lines.index("# Injected heading")
    assert lines[at - 1] == "```" and lines[at - 2] == lines[at + 1] == "````"   # a fence it cannot close


@pytest.mark.parametrize("verify", ["0", "1"])
def test_a_parent_git_only_assumed_good_is_run_and_a_bad_one_names_no_culprit(tiny_repo, run_cli, state_cmd,
                                                                              verify):
    """A side branch forked before GOOD carries a fault GOOD's line fixed; the merge brings it back.
    git names the branch's first commit on the word of its parent, an ancestor of GOOD it never ran."""
    #            A    S1   S2   G (GOOD) M1  M2 = merge(M1, S2)
    r = tiny_repo(["bad", "bad", "bad", "good", "good", "bad"], [[], [0], [1], [0], [3], [4, 2]])
    code, out, data = run_cli([f"{r.shas[3]}..main", "--repo", str(r.path), "--verify", verify, "--", *state_cmd])
    assert code == 3 and data["first_bad"] is None and data["candidates"] == [], out
    assert f"{r.shas[0][:12]}, a parent of the commit git named ({r.shas[1][:12]}), was never run" in out
    assert "--first-parent finds the merge" in out
    # in rounds, the branch's commits marked bad make git ask for the merge base A: bad, it is refused
    code, out, data = run_cli([f"{r.shas[3]}..main", "--repo", str(r.path), "--jobs", "3", "--no-cache", "--",
                               *state_cmd])
    assert code == 3 and data["first_bad"] is None and data["candidates"] == [], out
    assert "--first-parent finds the merge" in out and "Traceback" not in out
    code, out, data = run_cli([f"{r.shas[3]}..main", "--repo", str(r.path), "--first-parent", "--", *state_cmd])
    assert code == 0 and data["first_bad"] == r.shas[5], out
    # a parent that is good, as git assumed, leaves the answer standing at --verify 0, after one run
    r = tiny_repo(["good", "bad", "bad", "good", "good", "bad"], [[], [0], [1], [0], [3], [4, 2]], name="fine")
    code, out, data = run_cli([f"{r.shas[3]}..main", "--repo", str(r.path), "--verify", "0", "--", *state_cmd])
    assert code == 0 and data["first_bad"] == r.shas[1] and data["n_verify"] == 1, out


@pytest.mark.parametrize("verify", ["0", "1"])
def test_a_good_mark_that_fails_as_the_other_parent_of_the_named_merge_is_good_fails(tiny_repo, run_cli,
                                                                                   state_cmd, verify):
    """GOOD on a side branch already fails; the branch merges into the range. git names the merge on
    the word of the user's mark; GOOD, a parent of it, is run once: exit 6, no culprit."""
    #            M0    S1 (GOOD)  M1    M2 = merge(M1, S1)  M3
    r = tiny_repo(["good", "bad", "good", "bad", "bad"], [[], [0], [0], [2, 1], [3]])
    code, out, data = run_cli([f"{r.shas[1]}..main", "--repo", str(r.path), "--verify", verify, "--", *state_cmd])
    assert code == 6 and data["first_bad"] is None, out
    assert f"GOOD ({r.shas[1][:12]}) fails" in out and "older than the range" in out


def _script_repo(path, n: int = 8):
    """Commit i holds value.txt = i, check.sh (bad from 3 on) and pkg/check.sh (bad from 6 on)."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "pkg").mkdir()
    for name, limit in (("check.sh", 3), ("pkg/check.sh", 6)):
        (path / name).write_text(f'#!/bin/sh\n[ "$(cat "$(git rev-parse --show-toplevel)/value.txt")" -lt {limit} ]\n')
        (path / name).chmod(0o755)
    shas = []
    for i in range(n):
        (path / "value.txt").write_text(f"{i}\n")
        git(path, "add", "-A")
        git(path, "commit", "-qm", f"c{i}")
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas


def test_a_named_script_with_uncommitted_edits_is_refused_not_silently_left_out(
        tmp_path, run_cli, monkeypatch):
    repo = tmp_path / "repo"
    shas = _script_repo(repo)
    monkeypatch.chdir(repo)
    edited = (repo / "check.sh").read_text().replace("-lt 3", "-lt 5")
    (repo / "check.sh").write_text(edited)      # git bisect run would run this copy: bad from c5
    for staged in (False, True):
        if staged:
            git(repo, "add", "check.sh")
        code, out, data = run_cli(["main~7..main", "--", "./check.sh"])
        assert code == 2 and data is None and len(out.strip().splitlines()) == 1, out
        assert "check.sh (the command) has uncommitted changes" in out
        assert "commit it, or copy the edited file outside the repository" in out
    outside = tmp_path / "check.sh"             # the second way out: the edited copy runs
    outside.write_text(edited)
    outside.chmod(0o755)
    code, out, data = run_cli(["main~7..main", "--", str(outside)])
    assert code == 0 and data["first_bad"] == shas[5], out
    git(repo, "commit", "-qm", "c8 edited check")   # the first: committed, every probe runs its own copy
    code, out, data = run_cli(["main~8..main", "--", "./check.sh"])
    assert code == 0 and data["first_bad"] == shas[3], out


def test_from_a_subfolder_the_command_runs_in_the_same_folder_of_each_checkout(
        tmp_path, run_cli, monkeypatch):
    shas = _script_repo(tmp_path / "repo")
    monkeypatch.chdir(tmp_path / "repo" / "pkg")
    code, out, data = run_cli(["main~7..main", "--", "./check.sh"])   # pkg/check.sh, as in the shell
    assert code == 0 and data["first_bad"] == shas[6], out
    code, out, data = run_cli(["main~7..main", "--", "../check.sh"])  # the top one: not refused
    assert code == 0 and data["first_bad"] == shas[3], out
    assert '"folder": "pkg"' in data["predicate"]["predicate"]   # not the cache rows of the same argv at the top
    (tmp_path / "check.sh").write_text("exit 0\n")
    code, out, data = run_cli(["main~7..main", "--", "../../check.sh"])   # out of the checkout
    assert code == 2 and "../../check.sh (the command) is in your folder but not in the commits" in out


def test_a_commit_without_your_folder_is_a_skip_and_a_symlink_never_leads_out(tmp_path):
    from rlbisect.bisect.predicates.command import CommandPredicate, in_folder
    from rlbisect.errors import Verdict
    pred = CommandPredicate(["true"])
    pred.folder = "pkg"
    probe = pred.probe(tmp_path, "c1", None)
    assert probe.verdict is Verdict.SKIP and "this commit has no pkg/" in probe.reason
    (tmp_path / "outside").mkdir()
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / "pkg").symlink_to(tmp_path / "outside")
    assert in_folder(tmp_path / "checkout", "pkg") is None
    (tmp_path / "checkout" / "lib").mkdir()
    assert in_folder(tmp_path / "checkout", "lib") == tmp_path / "checkout" / "lib"
