"""`rlbisect run --flaky` end to end: real git, a predicate that lies, the CLI in-process."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers import git, live_members, start_rlbisect, sweep, wait_for

FLAKY_KEYS = {"posterior", "n_runs", "n_probes", "outcome", "confidence", "rates",
              "runs_per_commit", "first_bad", "candidates", "probes", "bisect_log", "status"}


def flaky_cmd(counter: Path, seed: int, per_mille: int = 100, bad_passes: int | None = None
              ) -> list[str]:
    """The state file's verdict, wrong with probability per_mille/1000 per run on a good commit
    and bad_passes/1000 on a bad one (default: the same rate on both sides).

    The random source is a hash of (run counter, seed): the counter file lives outside the
    repository, so every run - repeats of one commit included - draws a new number. rlbisect
    is not told the rates.
    """
    flip_bad = per_mille if bad_passes is None else bad_passes
    script = (
        f'c=$(cat {counter} 2>/dev/null || echo 0); c=$((c + 1)); echo $c > {counter}\n'
        # murmur3's 32-bit finalizer of (counter, seed): consecutive runs are independent draws
        f'x=$(( (c * 2654435761 + {seed} * 2246822519 + 374761393) & 4294967295 ))\n'
        'x=$(( x ^ (x >> 16) )); x=$(( (x * 2246822507) & 4294967295 ))\n'
        'x=$(( x ^ (x >> 13) )); x=$(( (x * 3266489909) & 4294967295 )); x=$(( x ^ (x >> 16) ))\n'
        f'v=0; p={per_mille}; [ "$(cat state)" = bad ] && v=1 && p={flip_bad}\n'
        '[ $((x % 1000)) -lt $p ] && v=$((1 - v))\n'
        'exit $v\n')
    return ["sh", "-c", script]


def runs_made(counter: Path) -> int:
    return int(counter.read_text()) if counter.exists() else 0


def replay(tmp_path: Path, repo: Path, log: str) -> subprocess.CompletedProcess:
    """`git bisect replay` of a captured log in a fresh clone."""
    clone = tmp_path / f"clone-{abs(hash(log)) % 10**8}"
    git(repo, "clone", "-q", str(repo), str(clone))
    (clone / "bisect.log").write_text(log)
    return subprocess.run(["git", "bisect", "replay", "bisect.log"], cwd=clone,
                          capture_output=True, text=True)


# (good commits fail, bad commits pass) per mille: issue 15's cases, the reverse rate change,
# and two rises the previous prior (f0 <= 0.25, f1 >= 0.45) could not hold
CASES = {"symmetric 0.05": (50, 50), "symmetric 0.1": (100, 100), "symmetric 0.2": (200, 200),
         "only bad passes 0.1": (0, 100), "gets flakier 0.05 -> 0.5": (50, 500),
         "reverse: good fails 0.2, bad fails 0.6": (200, 400),
         "now fails 30% of the time: 0 -> 0.3": (0, 700),
         "fails always, not 60%: 0.6 -> 1": (600, 0)}


@pytest.mark.parametrize("case", sweep(list(CASES), fast=2))
def test_each_kind_of_noise_on_real_histories_names_the_culprit_or_nobody(tiny_repo, run_cli,
                                                                          tmp_path, case):
    """Three 32-commit histories per case: the right culprit, or no answer (exit 3); never a
    confident wrong one. (benchmarks/bench_flaky.py measures 40 per case at 64 commits.)"""
    good_fails, bad_passes = CASES[case]
    right = 0
    for trial in range(3):
        culprit = 4 + (trial * 11 + len(case)) % 26
        r = tiny_repo(["good"] * culprit + ["bad"] * (33 - culprit), name=f"h{trial}", dirty=False)
        counter = tmp_path / f"counter-{trial}"
        code, out, data = run_cli(["main~32..main", "--repo", str(r.path), "--flaky", "--",
                                   *flaky_cmd(counter, 7 * trial + 1, good_fails, bad_passes)])
        assert code in (0, 3), out
        assert data["first_bad"] in (r.shas[culprit], None), (case, trial, out)
        assert data["n_runs"] == runs_made(counter)
        right += data["first_bad"] == r.shas[culprit]
    assert right >= 2, case


def test_finds_culprits_of_64_commit_histories_with_a_10_percent_liar(tiny_repo, run_cli,
                                                                       tmp_path):
    found, runs = 0, []
    for trial in range(8):
        culprit = 1 + (trial * 37 + 5) % 63
        r = tiny_repo(["good"] * culprit + ["bad"] * (64 - culprit), name=f"h{trial}",
                      dirty=trial == 0)
        before = r.snapshot()
        counter = tmp_path / f"counter-{trial}"
        code, out, data = run_cli(["main~63..main", "--repo", str(r.path), "--flaky", "--",
                                   *flaky_cmd(counter, seed=trial)])
        assert code in (0, 3), out
        assert FLAKY_KEYS <= set(data)
        assert data["n_runs"] == data["n_probes"] == runs_made(counter)  # every run was fresh
        found += data["first_bad"] == r.shas[culprit]
        runs.append(data["n_runs"])
        assert r.snapshot() == before
    # git-bayesect 1.2 needs about 24 runs on this case (benchmarks/bench_flaky.py)
    assert found >= 7 and sum(runs) / len(runs) <= 24, (found, runs)


def test_found_result_json_text_and_replayable_log(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 23 + ["bad"] * 9)
    before = r.snapshot()
    code, out, data = run_cli(["main~31..main", "--repo", str(r.path), "--flaky",
                               "--confidence", "0.99", "--", *flaky_cmd(tmp_path / "c", 3)])
    assert code == 0 and data["status"] == data["outcome"] == "found"
    assert data["first_bad"] == r.shas[23] and data["candidates"] == [r.shas[23]]
    post = data["posterior"]
    assert post[0]["commit"] == r.shas[23] and post[0]["p"] >= 0.99
    assert [p["p"] for p in post] == sorted((p["p"] for p in post), reverse=True)
    assert len(post) == 10 and sum(p["p"] for p in post) <= 1 + 1e-9
    for side in ("before", "after"):
        r_ = data["rates"][side]
        assert 0 <= r_["p05"] <= r_["mean"] <= r_["p95"] <= 1
    assert data["rates"]["before"]["mean"] < data["rates"]["after"]["mean"]
    assert data["first_parent"] is True and data["confidence"] == 0.99
    assert f"{r.shas[23]} is the first bad commit (posterior" in out and "predicate runs" in out
    # git was told only what is sure: GOOD side of the culprit good, the culprit bad
    assert f"git bisect good {r.shas[22]}" in data["bisect_log"]
    assert f"git bisect bad {r.shas[23]}" in data["bisect_log"]
    replayed = replay(tmp_path, r.path, data["bisect_log"])
    assert replayed.returncode == 0 and f"{r.shas[23]} is the first bad commit" in replayed.stdout
    assert r.snapshot() == before


def test_a_deterministic_predicate_costs_a_few_runs_over_log2n(tiny_repo, run_cli,
                                                                        state_cmd):
    r = tiny_repo(["good"] * 41 + ["bad"] * 23)
    code, _, data = run_cli(["main~63..main", "--repo", str(r.path), "--flaky", "--",
                             *state_cmd])
    assert code == 0 and data["first_bad"] == r.shas[41]
    # about twice git's 6: both endpoints are run too, and the noisy explanations ruled out
    assert data["n_runs"] <= math.ceil(math.log2(63)) + 8
    # a handful of runs per side: Jeffreys' prior still holds each mean a little off 0 and 1
    assert data["rates"]["before"]["mean"] < 0.1 and data["rates"]["after"]["mean"] > 0.9


def test_not_sure_within_the_budget_exits_3_with_the_likeliest_commits(tiny_repo, run_cli,
                                                                         tmp_path, state_cmd):
    r = tiny_repo(["good"] * 10 + ["bad"] * 6)
    before = r.snapshot()
    code, out, data = run_cli(["main~15..main", "--repo", str(r.path), "--flaky",
                               "--confidence", "0.999", "--max-runs", "4", "--", *state_cmd])
    assert code == 3 and data["exit_code"] == 3
    assert data["status"] == "unsure" and data["outcome"] == "unknown"
    assert data["first_bad"] is None and data["n_runs"] == 4 and r.shas[10] in data["candidates"]
    assert "run budget (4 runs) is spent" in out and "posterior of the likeliest" in out
    replayed = replay(tmp_path, r.path, data["bisect_log"])  # whatever was marked is valid
    assert replayed.returncode == 0 and "first bad commit" not in replayed.stdout
    assert r.snapshot() == before


def test_a_range_where_nothing_changed_says_so_rather_than_list_only_commits(tiny_repo, run_cli,
                                                                            tmp_path):
    # every commit fails 30% of the time: the user's BAD is no worse than GOOD
    r = tiny_repo(["good"] * 16)
    code, out, data = run_cli(["main~15..main", "--repo", str(r.path), "--flaky",
                               "--max-runs", "60", "--", *flaky_cmd(tmp_path / "c", 5, 300)])
    assert code == 3 and data["outcome"] == "unknown" and data["first_bad"] is None
    # the likeliest answers until they hold 95%, "nothing changed" among them, not just commits
    shown, mass = [], 0.0
    for row in data["posterior"]:
        shown.append(row)
        mass += row["p"]
        if mass >= 0.95:
            break
    assert {"no regression in range", "GOOD already bad"} & {row["commit"] for row in shown}
    listed = out.split("posterior of the likeliest answers:\n")[1].splitlines()
    assert [ln.split()[:2] for ln in listed[:len(shown)]] == \
        [[f"{row['p']:.3f}", row["commit"].split()[0]] for row in shown], out
    # the endpoints' counts, as measured, and no per-side rate of a step nobody found
    runs = data["runs_per_commit"]
    counts = [f"{side} {runs[sha]['bad']} of {runs[sha]['bad'] + runs[sha]['good']}"
              for side, sha in (("GOOD", r.shas[0]), ("BAD", r.shas[-1])) if sha in runs]
    assert counts and f"runs failed at {', '.join(counts)}" in out
    assert "failure rate before the culprit" not in out
    # with the default budget the runs go on until "nothing changed" is sure (exit 5 or 6)
    code, out, data = run_cli(["main~15..main", "--repo", str(r.path), "--flaky", "--",
                               *flaky_cmd(tmp_path / "c", 5, 300)])
    assert code in (5, 6) and data["first_bad"] is None and data["n_runs"] < data["max_runs"]
    assert data["outcome"] in ("no_regression", "good_fails"), out
    assert "runs failed at GOOD" in out and "exit_code = " not in out   # counts, not one run


def test_a_fix_inside_a_regression_search_is_no_regression_at_least_as_often(tiny_repo, run_cli, tmp_path):
    # GOOD's side fails 70% of the time, BAD's 10%: the predicate got better, which the model has no
    # step for; the answer must not say BAD passes "as often" as GOOD
    r = tiny_repo(["good"] * 6 + ["bad"] * 6)
    code, out, data = run_cli(["main~11..main", "--repo", str(r.path), "--flaky", "--",
                               *flaky_cmd(tmp_path / "c", 3, 700, 900)])
    assert code in (5, 6) and data["first_bad"] is None, out
    assert "at least as often as" in data["message"]


def test_only_skipped_commits_left_exits_3_like_git(tiny_repo, run_cli, state_cmd, tmp_path):
    r = tiny_repo(["good", "good", "skip", "skip", "skip", "bad", "bad"])
    code, out, data = run_cli(["main~6..main", "--repo", str(r.path), "--flaky", "--",
                               *state_cmd])
    assert code == 3 and data["outcome"] == "skipped"
    assert data["candidates"] == r.shas[2:6]
    assert "only skipped commits can still hold it" in out
    replayed = replay(tmp_path, r.path, data["bisect_log"])
    assert "could be any of" in replayed.stdout
    assert all(sha in replayed.stdout for sha in data["candidates"])
    assert "# only skipped commits left to test" in data["bisect_log"]


@pytest.mark.parametrize("args,needle", [
    (["--confidence", "0.5"], "--confidence: Input should be greater than 0.5"),
    (["--confidence", "1"], "--confidence: Input should be less than 1"),
    (["--max-runs", "0"], "--max-runs: Input should be greater than or equal to 1"),
    (["--timeout", "0"], "--timeout: Input should be greater than 0"),
    (["--jobs", "2", "--verify", "2"], "--verify is for a deterministic predicate"),
])
def test_bad_flaky_input_exits_2_and_changes_nothing(tiny_repo, run_cli, state_cmd, args,
                                                    needle):
    r = tiny_repo(["good", "good", "bad", "bad"])
    before = r.snapshot()
    code, out, data = run_cli(["main~3..main", "--repo", str(r.path), "--flaky", *args, "--",
                               *state_cmd])
    assert code == 2 and data is None and needle in out and len(out.strip().splitlines()) == 1
    assert r.snapshot() == before


def test_jobs_run_rounds_of_several_runs_and_name_what_one_at_a_time_names(tiny_repo, run_cli, state_cmd):
    r = tiny_repo(["good"] * 21 + ["bad"] * 11)
    before = r.snapshot()
    _, _, alone = run_cli(["main~31..main", "--repo", str(r.path), "--flaky", "--no-cache", "--", *state_cmd])
    code, out, data = run_cli(["main~31..main", "--repo", str(r.path), "--flaky", "--jobs", "3", "--no-cache",
                               "--", *state_cmd])
    assert code == 0 and data["first_bad"] == alone["first_bad"] == r.shas[21], out
    rounds = [p["round"] for p in data["probes"]]
    assert data["n_runs"] == len(rounds) and max(rounds) < len(rounds)    # several runs a round
    assert max(rounds) <= alone["n_runs"] * 0.6 and r.snapshot() == before


def test_an_aborting_predicate_exits_4(tiny_repo, run_cli, state_cmd):
    r = tiny_repo(["good"] + ["255"] * 5)
    code, out, data = run_cli(["main~5..main", "--repo", str(r.path), "--flaky", "--",
                               *state_cmd])
    assert code == 4 and data["outcome"] == "aborted" and "exit 255" in out


def test_flaky_bisects_the_first_parent_chain(tiny_repo, run_cli, state_cmd):
    #   c0 - c1 ------ c4(merge) - c5      c2 - c3 (breaks it) on a side branch off c0
    r = tiny_repo(["good", "good", "good", "bad", "bad", "bad"],
                  parents=[[], [0], [0], [2], [1, 3], [4]])
    code, _, data = run_cli([f"{r.shas[0]}..main", "--repo", str(r.path), "--flaky", "--",
                             *state_cmd])
    assert code == 0 and data["first_bad"] == r.shas[4]
    assert not {p["commit"] for p in data["probes"]} & {r.shas[2], r.shas[3]}
    # the answer says it is a merge whose branch was not searched (GOOD itself may sit on it)
    assert f"a merge: the change came in with its branch (other parent {r.shas[3][:12]})" in data["message"]


def test_runs_are_recorded_apart_and_a_rerun_starts_from_them(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 12 + ["bad"] * 4)
    counter = tmp_path / "counter"
    cmd = flaky_cmd(counter, seed=5)
    _, _, first = run_cli(["main~15..main", "--repo", str(r.path), "--flaky", "--", *cmd])
    made = runs_made(counter)
    assert first["n_runs"] == made and not any(p["cached"] for p in first["probes"])
    _, out, again = run_cli(["main~15..main", "--repo", str(r.path), "--flaky", "--", *cmd])
    assert again["n_runs"] == 0 and runs_made(counter) == made          # nothing re-run
    assert again["first_bad"] == first["first_bad"] and f"(+{made} recorded 20" in out
    assert [p["verdict"] for p in again["probes"]] == [p["verdict"] for p in first["probes"]]
    # a deterministic bisect with the same command does not take those runs as truth
    _, _, plain = run_cli(["main~15..main", "--repo", str(r.path), "--", *cmd])
    assert plain["n_probes"] >= 1 and not any(p["cached"] for p in plain["probes"])
    # --no-cache: fresh runs only
    _, _, fresh = run_cli(["main~15..main", "--repo", str(r.path), "--flaky", "--no-cache",
                           "--", *cmd])
    assert fresh["n_runs"] >= 1 and not any(p["cached"] for p in fresh["probes"])


@pytest.mark.slow
def test_sigint_during_a_flaky_run_cleans_up_everything(tiny_repo, tmp_path):
    r = tiny_repo(["good"] * 4 + ["bad"] * 4)
    before = r.snapshot()
    pidfile = tmp_path / "predicate.pid"
    proc = start_rlbisect(r.path, ["sh", "-c", f"echo $$ > {pidfile}; sleep 60 & wait"],
                          "--flaky", "--json", str(tmp_path / "partial.json"))
    pgid = int(wait_for(pidfile, proc))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, (out, err)
    assert "interrupted by SIGINT" in out and "Traceback" not in err
    partial = json.loads((tmp_path / "partial.json").read_text())
    assert partial["status"] == partial["outcome"] == "interrupted" and partial["n_runs"] == 0
    assert live_members(pgid, settle=2.0) == []
    assert not list(Path(tempfile.gettempdir()).glob(f"rlbisect-{proc.pid}-*"))
    assert r.snapshot() == before


def test_help_documents_the_flaky_options():
    from typer.testing import CliRunner

    from rlbisect.cli.app import app
    out = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    assert "--flaky" in out and "--confidence" in out and "--max-runs" in out
    assert "first-parent chain" in out and "rlbisect run v1.2..main --flaky" in out
