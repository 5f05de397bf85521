"""The thin CLI: in-process with CliRunner, plus the console entry point for one-line usage errors."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from rlbisect.cli.app import COMMANDS, app

runner = CliRunner()


def test_check_passes_and_exits_0():
    r = runner.invoke(app, ["check"])
    assert r.exit_code == 0 and "all checks passed" in r.output


def test_check_names_the_failing_invariant_and_exits_1():
    r = runner.invoke(app, ["check", "--bug", "sign_flip"])
    assert r.exit_code == 1 and "FAILED: update raises log pi where A > 0" in r.output


def test_check_json():
    r = runner.invoke(app, ["check", "--json", "--bug", "accum_local"])
    out = json.loads(r.output)
    assert r.exit_code == 1 and not out["accumulated = one-pass gradient"]["passed"]
    assert out["mask = policy tokens"] == {"value": 0.0, "passed": True, "seed": 1}


def test_check_matrix_json_and_plot(tmp_path):
    png = tmp_path / "m.png"
    r = runner.invoke(app, ["check", "--matrix", "--json", "--plot", str(png)])
    table = json.loads(r.output)
    from reference_trainer.faults import BUGS
    assert r.exit_code == 0 and list(table) == ["none", *BUGS]       # a row per fault the adapter lists
    assert [k for k, v in table["sign_flip"].items() if v["passed"] is False] == [
        "update raises log pi where A > 0", "advantages = the declared estimator", "mask and advantages = the step's batch"]
    assert not [k for k, v in table["none"].items() if v["passed"] is False]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_check_bad_adapter_exits_2():
    r = runner.invoke(app, ["check", "--adapter", "no.such.module:f"])
    assert r.exit_code == 2 and "cannot import" in r.output


def test_plot_without_matrix_is_an_error():
    assert runner.invoke(app, ["check", "--plot", "x.png"]).exit_code == 2


@pytest.mark.slow
def test_train_writes_rows_and_a_compact_line_per_step(tmp_path):
    out = tmp_path / "run.jsonl"
    r = runner.invoke(app, ["train", "--steps", "2", "--eval-every", "1", "--out", str(out)])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert r.exit_code == 0 and [row["step"] for row in rows] == [0, 1] and "eval_pass" in rows[1]
    assert r.output.count("step ") == 2 and "reward" in r.output
    assert "detector" not in r.output   # healthy: silent


@pytest.mark.slow
def test_train_says_when_a_detector_fires_with_or_without_a_snapshot_dir(tmp_path):
    r = runner.invoke(app, ["train", "--steps", "1", "--lr", "1e-2"])   # approx_kl 0.15 at step 0
    assert r.exit_code == 0 and "detector ceiling:approx_kl fired at step 0" in r.output
    assert "not saved: add --snapshot-dir" in r.output
    r = runner.invoke(app, ["train", "--steps", "1", "--lr", "1e-2", "--snapshot-dir", str(tmp_path)])
    assert "fired at step 0" in r.output and "; saved" in r.output and (tmp_path / "step-000000.pt").exists()


@pytest.mark.slow
def test_plot_dashboard(tmp_path):
    runs = []
    for bug in (None, "mask_shift"):
        out = tmp_path / f"{bug or 'healthy'}.jsonl"
        runner.invoke(app, ["train", "--steps", "3", "--out", str(out)] + (["--bug", bug] if bug else []))
        runs.append(str(out))
    png = tmp_path / "dash.png"
    r = runner.invoke(app, ["plot", *runs, "--out", str(png), "--metrics", "logp_gap,grad_norm"])
    assert r.exit_code == 0 and png.stat().st_size > 10_000
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert runner.invoke(app, ["plot", str(bad), "--out", str(png)]).exit_code == 2


def run_main(*args):
    return subprocess.run([sys.executable, "-c", "from rlbisect.cli.app import main; main()", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_usage_errors_are_one_line_with_exit_2():
    for args, needle in ((["train", "--lr", "abc"], "--lr"), (["train", "--reward", "foo"], "--reward"),
                         (["train", "--bug", "nope"], "unknown bug"), (["train", "--steps", "0"], "--steps"),
                         (["train", "--lr", "inf"], "--lr: Input should be a finite number"),
                         (["train", "--snapshot-dir", __file__], "is a file, not a folder"),
                         (["check", "--nope"], "No such option")):
        r = run_main(*args)
        assert r.returncode == 2, args
        assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr


def test_timeline_rows_give_a_jobs_round_one_row_and_a_sequential_probe_its_own():
    from types import SimpleNamespace as P

    from rlbisect.bisect.timeline import timeline_rows
    seq = [P(cached=False, round=i, order=i) for i in (1, 2, 3)]
    assert timeline_rows(seq) == [1, 2, 3]
    kary = [P(cached=False, round=r, order=i) for i, r in enumerate((1, 1, 2, 2, 3), start=1)]
    assert timeline_rows(kary) == [1, 1, 2, 2, 3]
    recalled = [P(cached=True, round=0, order=1), P(cached=True, round=0, order=2),
                P(cached=False, round=1, order=3)]
    assert timeline_rows(recalled) == [1, 2, 3]


def test_help_keeps_brackets_and_every_command_has_an_example():
    for command in COMMANDS:                     # the real table: a new command cannot skip its example
        out = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
        assert "Example: rlbisect " + command in out, command
    assert "pip install 'rlbisect[ray]'" in runner.invoke(app, ["run", "--help"],
                                                          env={"COLUMNS": "300"}).output


def test_first_use_is_announced_only_before_the_starting_policy_is_built(tmp_path, monkeypatch):
    from reference_trainer.policy_cache import cached_path
    from rlbisect.tinyagent import first_use_note
    monkeypatch.setenv("RLBISECT_CACHE", str(tmp_path))
    assert "building TinyAgent's starting policy" in first_use_note()
    cached_path().write_bytes(b"")                        # built (as far as the note can tell)
    assert first_use_note() is None


def test_plot_refuses_unknown_metrics_and_missing_folders_before_drawing(tmp_path):
    run = tmp_path / "run.jsonl"
    run.write_text('{"step": 0, "reward": 0.1}\n')
    r = runner.invoke(app, ["plot", str(run), "--metrics", "reward,nope", "--out", str(tmp_path / "d.png")])
    assert r.exit_code == 2 and "unknown metric 'nope'" in r.output
    r = runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / "no" / "d.png")])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / "d.txt")])
    assert r.exit_code == 2 and "a figure needs one of the extensions" in r.output
    (tmp_path / "nostep.jsonl").write_text('{"reward": 0.1}\n')
    r = runner.invoke(app, ["plot", str(tmp_path / "nostep.jsonl")])
    assert r.exit_code == 2 and "no step and reward columns" in r.output
    (tmp_path / "a.csv").write_text("step,reward\n0,0.1\n")
    r = runner.invoke(app, ["plot", str(tmp_path / "a.csv")])
    assert r.exit_code == 2 and "not a run written by `rlbisect train --out` (JSON lines)" in r.output


def test_two_runs_with_one_file_name_stay_two_runs(tmp_path):
    from rlbisect.plots import load_runs
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "run.jsonl").write_text('{"step": 0, "reward": 0.1}\n')
    runs = load_runs([str(tmp_path / "a" / "run.jsonl"), str(tmp_path / "b" / "run.jsonl")])
    assert list(runs) == ["a/run", "b/run"]
    (tmp_path / "a" / "run.json").write_text('{"step": 0, "reward": 0.2}\n')   # told apart by the suffix
    runs = load_runs([str(tmp_path / "a" / "run.jsonl"), str(tmp_path / "a" / "run.json")])
    assert list(runs) == ["run.jsonl", "run.json"] and runs["run.json"] == [{"step": 0, "reward": 0.2}]


def test_a_run_row_without_a_step_is_refused_and_a_value_that_is_no_number_is_not_drawn(tmp_path):
    from rlbisect.errors import InputError
    from rlbisect.plots import load_runs
    f = tmp_path / "r.jsonl"
    f.write_text('{"step": 0, "reward": 0.5}\n{"step": 1, "reward": null, "loss": "n/a"}\n')
    assert load_runs([str(f)]) == {"r": [{"step": 0, "reward": 0.5}, {"step": 1}]}
    f.write_text('{"step": 0, "reward": 0.5}\n{"reward": 0.6}\n')
    with pytest.raises(InputError, match="row 2 has no numeric step"):
        load_runs([str(f)])


@pytest.mark.slow
def test_a_predicate_option_without_the_double_dash_says_where_it_goes():
    r = run_main("run", "HEAD~3..HEAD", "pytest", "-x", "tests/t.py")
    assert r.returncode == 2 and "No such option: -x" in r.stderr and "after --" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_training_step_that_raises_is_saved_and_replays_bit_for_bit(tmp_path):
    """adv_no_eps: a flat group's 0/0 makes the weights NaN and the evaluation after the last update
    raises; the pre-update state is saved with the error as its hit, then the error goes on. With a
    step after it, the NaN row is saved by the detectors before the next step's sampling raises."""
    from rlbisect.steps.format import load_snapshot
    r = runner.invoke(app, ["train", "--bug", "adv_no_eps", "--steps", "1", "--snapshot-dir", str(tmp_path / "a")])
    # one line, not the trainer's traceback: the step, the error, the state kept
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert ("the trainer raised at step 0: RuntimeError: probability tensor contains" in r.output
            and f"saved in {tmp_path / 'a' / 'step-000000.pt'} (rlbisect replay it)" in r.output)
    snap = load_snapshot(tmp_path / "a" / "step-000000.pt")
    assert [h.detector for h in snap.hits] == ["raised"] and "probability tensor" in snap.hits[0].message
    replay = runner.invoke(app, ["replay", str(tmp_path / "a" / "step-000000.pt")])
    assert replay.exit_code == 0 and "post-update sha256 identical" in replay.output
    r = runner.invoke(app, ["train", "--bug", "adv_no_eps", "--steps", "2", "--snapshot-dir", str(tmp_path / "b"),
                            "--out", str(tmp_path / "b.jsonl")])
    assert r.exit_code == 1 and "detector nonfinite fired at step 0" in r.output
    assert ("the trainer raised at step 1" in r.output and "first detector hit: nonfinite at step 0" in r.output
            and f"the rows before it are in {tmp_path / 'b.jsonl'}" in r.output)
    assert {h.detector for h in load_snapshot(tmp_path / "b" / "step-000000.pt").hits} == {"nonfinite"}


@pytest.mark.slow
def test_the_cli_imports_torch_only_for_commands_that_need_it():
    r = subprocess.run([sys.executable, "-c", "import sys, rlbisect.cli.app; print('torch' in sys.modules)"],
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "False", r.stderr


@pytest.mark.slow
def test_check_jobs_needs_the_matrix():
    r = run_main("check", "--jobs", "2")
    assert r.returncode == 2 and "--jobs runs rows of the matrix: add --matrix" in r.stderr


def test_plot_says_when_a_runs_reward_is_no_number(tmp_path):
    """A reward logged as null or text was drawn as nothing, with exit 0 and no word."""
    good, odd = tmp_path / "good.jsonl", tmp_path / "odd.jsonl"
    good.write_text('{"step": 0, "reward": 0.1}\n{"step": 1, "reward": 0.2}\n')
    odd.write_text('{"step": 0, "reward": null}\n{"step": 1, "reward": "n/a"}\n')
    r = runner.invoke(app, ["plot", str(good), str(odd), "--out", str(tmp_path / "d.png")])
    assert r.exit_code == 0 and "odd: no reward is a number" in r.output and "good:" not in r.output, r.output
