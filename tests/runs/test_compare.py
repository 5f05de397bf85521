"""`rlbisect compare`: runs a user already has, judged against GOOD's seed spread."""

import json
import random

import pytest
from typer.testing import CliRunner

from rlbisect.cli.app import app
from rlbisect.runs.compare import compare, split_runs
from rlbisect.errors import InputError

runner = CliRunner()


def write_runs(folder, name, n, seed0, reward=0.5, grad=1.0, fmt="jsonl"):
    folder.mkdir(exist_ok=True)
    paths = []
    for i in range(n):
        rng = random.Random(seed0 + i)
        rows = [{"step": s, "train/reward": reward + rng.gauss(0, 0.03), "grad_norm": grad * (1 + rng.gauss(0, 0.05))}
                for s in range(6)]
        p = folder / f"{name}{i}.{fmt}"
        if fmt == "csv":
            p.write_text("step,train/reward,grad_norm\n" + "".join(
                f"{r['step']},{r['train/reward']},{r['grad_norm']}\n" for r in rows))
        else:
            p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(str(p))
    return paths


def test_a_moved_metric_is_named_and_the_same_code_is_not(tmp_path):
    good = write_runs(tmp_path, "g", 3, 0)
    moved = write_runs(tmp_path, "m", 3, 100, grad=3.0, fmt="csv")
    same = write_runs(tmp_path, "s", 3, 200)
    c = compare(good, moved)
    assert c.decision.verdict == "bad" and [t.metric for t in c.decision.deciding] == ["grad_norm"]
    assert c.exit_code == 1 and "grad_norm" in c.verdict_line()
    same_code = compare(good, same)   # at one look a small spread may leave it unsure, never moved
    assert same_code.decision.verdict != "bad" and not same_code.decision.deciding
    # one metric, the way it matters: reward did not get worse
    assert compare(good, moved, metric="train/reward", direction="lower").exit_code == 0


def test_cli_prints_the_table_writes_json_and_plot_and_exits_by_verdict(tmp_path):
    good, moved = write_runs(tmp_path, "g", 3, 0), write_runs(tmp_path, "m", 3, 100, grad=3.0)
    r = runner.invoke(app, ["compare", *good, "--vs", *moved, "--metric-map", "train/reward=reward",
                            "--json", str(tmp_path / "c.json"), "--plot", str(tmp_path / "c.png")])
    assert r.exit_code == 1, r.output
    assert "grad_norm" in r.output and "<- moved" in r.output and "reward" in r.output
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["verdict"] == "bad" and {m["metric"] for m in doc["metrics"]} == {"reward", "grad_norm"}
    assert (tmp_path / "c.png").stat().st_size > 1000


@pytest.mark.parametrize("args,said", [
    (["a", "--vs", "b", "c"], "at least 2 runs"),
    (["a", "b", "c"], "--vs"),
    (["a", "b", "--vs", "c", "d", "--bogus"], "unknown option --bogus"),
])
def test_bad_input_is_one_line(args, said):
    with pytest.raises(InputError, match=said):
        split_runs(args)


def test_cli_bad_input_exits_2(tmp_path):
    good, other = write_runs(tmp_path, "g", 2, 0), write_runs(tmp_path, "o", 2, 9)
    for extra in (["--metric", "nope"], ["--direction", "lower"], ["--direction", "up", "--metric", "grad_norm"]):
        r = runner.invoke(app, ["compare", *extra, *good, "--vs", *other])
        assert r.exit_code == 2 and r.output.startswith("rlbisect compare:"), r.output
