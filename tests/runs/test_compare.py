"""`rlbisect compare`: runs a user already has, judged against GOOD's seed spread."""

import json
import random
from pathlib import Path

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


def _rows(folder, name, values, extra=lambda i, s: {}):
    """One JSONL run per value list: reward = the value at every step (raw text, NaN/null allowed)."""
    folder.mkdir(exist_ok=True)
    paths = []
    for i, value in enumerate(values):
        p = folder / f"{name}{i}.jsonl"
        p.write_text("".join('{"step": %d, "reward": %s, "loss": %s%s}\n' % (
            s, value, 0.1 * (i + 1) + 0.01 * s, "".join(f', "{k}": {v}' for k, v in extra(i, s).items()))
            for s in range(4)))
        paths.append(str(p))
    return paths


@pytest.mark.parametrize("bad,how", [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf"), ("null", "null"),
                                     ('"oops"', "a string ('oops')"), ("true", "a boolean (true)"),
                                     ("1e200", "inf")])
def test_a_metric_that_stops_being_a_finite_number_is_a_regression_not_a_traceback(tmp_path, bad, how):
    good = _rows(tmp_path / "g", "g", ["0.5", "0.52", "0.49"])
    new = _rows(tmp_path / "n", "n", ["0.5", bad, "0.51"])
    r = runner.invoke(app, ["compare", *good, "--vs", *new, "--json", str(tmp_path / "c.json")])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output and f"reward ({how} at row 0 of run 1)" in r.output
    assert json.loads((tmp_path / "c.json").read_text())["nonfinite"][0]["metric"] == "reward"


def test_the_other_metrics_are_still_judged_beside_one_that_went_nan(tmp_path):
    good = write_runs(tmp_path, "g", 3, 0)
    new = write_runs(tmp_path, "n", 3, 100, grad=3.0)
    for path in new[:1]:   # one run's reward goes NaN; its grad_norm tripled, as in every run
        rows = [json.loads(line) for line in open(path)]
        rows[-1]["train/reward"] = float("nan")
        open(path, "w").write("".join(json.dumps(r) + "\n" for r in rows))
    r = runner.invoke(app, ["compare", *good, "--vs", *new, "--json", str(tmp_path / "c.json")])
    assert r.exit_code == 1 and "train/reward (nan at row 5 of run 0)" in r.output, r.output
    assert "grad_norm" in r.output.splitlines()[-1] and "<- moved" in r.output
    judged = json.loads((tmp_path / "c.json").read_text())["metrics"]
    assert [(m["metric"], m["moved_beyond_spread"]) for m in judged] == [("grad_norm", True)]


def test_huge_values_judge_without_overflow_and_nested_json_is_one_line(tmp_path):
    good = _rows(tmp_path / "g", "g", ["1e149", "1.01e149", "0.99e149"])
    new = _rows(tmp_path / "n", "n", ["1e100", "2e100", "3e100"])
    r = runner.invoke(app, ["compare", *good, "--vs", *new])
    assert r.exit_code == 1 and "reward" in r.output and "Traceback" not in r.output, r.output
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"a": ' * 60 + "1" + "}" * 60 + "\n")
    r = runner.invoke(app, ["compare", str(deep), str(deep), "--vs", *new[:2]])
    assert r.exit_code == 2 and "nested deeper" in r.output and r.output.count("\n") == 1


def test_bookkeeping_by_name_and_by_behaviour_is_left_out_unless_named(tmp_path):
    """Wall-clock, seeds, step counters and summary rows move with the machine, not the code."""
    def extra(i, s):
        return {"t": 1000.0 * (i + 1) + s * 37.5, "summary/train_seconds": 12.0 * (i + 1), "summary/seed": i,
                "wallclock_ms": 5 * s + i, "stamp": 1.7e9 + 60 * s + i, "lr": 0.001}
    good = _rows(tmp_path / "g", "g", ["0.5", "0.52", "0.49"], extra)
    new = _rows(tmp_path / "n", "n", ["0.51", "0.5", "0.5"], lambda i, s: {**extra(i + 7, s), "lr": 0.001})
    result = compare(good, new)
    judged = {t.metric for t in result.decision.tests}
    assert judged == {"reward", "loss"} and result.exit_code == 0, judged
    assert {"stamp", "lr"} <= set(result.bookkeeping)              # by behaviour: a clock, a constant
    named = compare(good, new, metric="summary/train_seconds", direction="change")
    assert [t.metric for t in named.decision.tests] == ["summary/train_seconds"]


def test_runs_with_no_metric_in_common_are_bad_input_not_unsure(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    for i, (name, key) in enumerate((("a0", "x"), ("a1", "x"), ("b0", "y"), ("b1", "y"))):
        (a / f"{name}.jsonl").write_text(f'{{"{key}": 1.0}}\n{{"{key}": {2.0 + i}}}\n')
    r = runner.invoke(app, ["compare", str(a / "a0.jsonl"), str(a / "a1.jsonl"), "--vs",
                            str(a / "b0.jsonl"), str(a / "b1.jsonl")])
    assert r.exit_code == 2 and "nothing to compare" in r.output


def test_the_plot_gives_each_metric_its_own_axis(tmp_path):
    good = write_runs(tmp_path / "g", "g", 3, 0)
    new = write_runs(tmp_path / "n", "n", 3, 10, reward=0.8, grad=100.0)
    png = tmp_path / "p.png"
    from matplotlib import pyplot as plt
    seen = []
    original = plt.subplots

    def spy(*a, **kw):
        seen.append(kw.get("sharey"))
        return original(*a, **kw)
    import rlbisect.plots as plots
    plots.plt.subplots, saved = spy, plots.plt.subplots
    try:
        r = runner.invoke(app, ["compare", *good, "--vs", *new, "--plot", str(png)])
    finally:
        plots.plt.subplots = saved
    assert r.exit_code == 1 and png.read_bytes()[:4] == b"\x89PNG" and seen == [False]


def test_verl_runs_are_compared_on_our_reward_without_a_map(tmp_path):
    def verl_runs(name, n, seed0, score):
        paths = []
        for i in range(n):
            rng = random.Random(seed0 + i)
            p = tmp_path / f"{name}{i}.jsonl"
            p.write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": score + rng.gauss(0, 0.02)}})
                                 + "\n" for s in range(6)))
            paths.append(str(p))
        return paths
    good, worse = verl_runs("g", 3, 0, 0.6), verl_runs("w", 3, 50, 0.3)
    assert compare(good, worse, metric="reward", direction="lower").exit_code == 1
    assert compare(good, verl_runs("s", 3, 90, 0.6), metric="reward", direction="lower").decision.verdict != "bad"


def test_a_value_that_is_not_a_number_counts_in_the_scored_window_and_not_before_it(tmp_path):
    """An inf at an early step that later rows recover from (a skipped AMP overflow step) is the
    trainer working; in the last --window rows it is the regression."""
    good = write_runs(tmp_path, "g", 3, 0)
    new = write_runs(tmp_path, "n", 3, 100)
    rows = [json.loads(line) for line in open(new[1])]
    rows[0]["grad_norm"] = float("inf")
    rows[-1]["train/reward"] = "n/a"
    open(new[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
    result = compare(good, new, window=2)
    assert list(result.nonfinite) == ["train/reward"] and result.exit_code == 1
    assert "train/reward (a string ('n/a') at row 5 of run 1)" in result.verdict_line()


def test_a_metric_good_logs_that_the_runs_stopped_logging_is_no_evidence_of_nothing_moved(tmp_path):
    """A renamed reward: the dashboard of what both sides log would be the loss alone, and say
    "nothing moved" about a run whose reward fell by half."""
    good = _rows(tmp_path / "g", "g", ["0.5", "0.52", "0.49"], lambda i, s: {})
    new = _rows(tmp_path / "n", "n", ["0.25", "0.26", "0.24"], lambda i, s: {})
    for path in new:   # the reward now logged under another name
        rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
        Path(path).write_text("".join(json.dumps({**{k: v for k, v in r.items() if k != "reward"},
                                                  "train/reward": r["reward"]}) + "\n" for r in rows))
    with pytest.raises(InputError, match="'reward' is not logged by every run.*--metric-map"):
        compare(good, new)
    assert compare(good, new, metric_map={"train/reward": "reward"}).verdict == "bad"
    assert compare(good, new, metrics=["loss"]).verdict == "good"    # chosen: the loss alone


def test_goods_runs_that_are_all_alike_give_no_spread_to_judge_against(tmp_path):
    """A script that ignores the seed: GOOD's runs are copies, and a change of 1e-9 would be
    "infinite spreads, p = 0" (the short-run predicate skips such a probe too)."""
    good = _rows(tmp_path / "g", "g", ["0.5", "0.5", "0.5"])
    for path in good[1:]:
        Path(path).write_text(Path(good[0]).read_text())
    new = _rows(tmp_path / "n", "n", ["0.500000001", "0.500000001"])
    with pytest.raises(InputError, match="no seed spread"):
        compare(good, new)


def test_json_or_plot_naming_an_input_run_is_refused_before_it_is_overwritten(tmp_path):
    good = _rows(tmp_path / "g", "g", ["0.5", "0.52", "0.49"])
    new = _rows(tmp_path / "n", "n", ["0.51", "0.5", "0.5"])
    before = Path(new[1]).read_text()
    r = runner.invoke(app, ["compare", *good, "--vs", *new, "--json", new[1]])
    assert r.exit_code == 2 and "is an input" in r.output, r.output
    assert Path(new[1]).read_text() == before


def test_paired_runs_are_read_seed_by_seed(tmp_path):
    """Matched seeds of a deterministic trainer, every seed's reward lower by the same 0.6 spreads:
    unpaired, the seed spread hides it; --paired, it moved."""
    base = [0.51372052839, 0.47105831574, 0.54122681937]
    good = _rows(tmp_path / "g", "g", [repr(b) for b in base])
    new = _rows(tmp_path / "n", "n", [repr(b - 0.02) for b in base])
    assert compare(good, new).verdict != "bad"
    moved = compare(good, new, paired=True)
    assert moved.verdict == "bad" and moved.decision.tests[0].by_seed
    with pytest.raises(InputError, match="--paired: 3 GOOD runs and 2 others"):
        compare(good, new[:2], paired=True)
    r = runner.invoke(app, ["compare", *good, "--vs", *new, "--paired"])
    assert r.exit_code == 1 and "reward" in r.output
