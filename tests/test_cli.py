"""The thin CLI: in-process with CliRunner, plus the console entry point for one-line usage errors."""

import json
import subprocess
import sys

from typer.testing import CliRunner

from rlbisect.cli import app

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
    assert out["mask = policy tokens"] == {"value": 0.0, "passed": True}


def test_check_matrix_json_and_plot(tmp_path):
    png = tmp_path / "m.png"
    r = runner.invoke(app, ["check", "--matrix", "--json", "--plot", str(png)])
    table = json.loads(r.output)
    assert r.exit_code == 0 and list(table)[0] == "none" and len(table) == 8
    assert [k for k, v in table["sign_flip"].items() if not v["passed"]] == ["update raises log pi where A > 0"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_check_bad_adapter_exits_2():
    r = runner.invoke(app, ["check", "--adapter", "no.such.module:f"])
    assert r.exit_code == 2 and "cannot import" in r.output


def test_plot_without_matrix_is_an_error():
    assert runner.invoke(app, ["check", "--plot", "x.png"]).exit_code == 2


def test_train_writes_rows_and_a_compact_line_per_step(tmp_path):
    out = tmp_path / "run.jsonl"
    r = runner.invoke(app, ["train", "--steps", "2", "--eval-every", "1", "--out", str(out)])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert r.exit_code == 0 and [row["step"] for row in rows] == [0, 1] and "eval_pass" in rows[1]
    assert r.output.count("step ") == 2 and "reward" in r.output


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
    return subprocess.run([sys.executable, "-c", "from rlbisect.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=120)


def test_usage_errors_are_one_line_with_exit_2():
    for args, needle in ((["train", "--lr", "abc"], "--lr"), (["train", "--reward", "foo"], "--reward"),
                         (["train", "--bug", "nope"], "unknown bug"), (["train", "--steps", "0"], "--steps"),
                         (["check", "--nope"], "No such option")):
        r = run_main(*args)
        assert r.returncode == 2, args
        assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
