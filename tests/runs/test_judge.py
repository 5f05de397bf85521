"""What a run's rows say about the run itself: its fingerprint (rlbisect.runs.judge)."""

from rlbisect.runs.judge import fingerprint


def test_a_fingerprint_is_the_record_without_its_bookkeeping():
    run = [{"step": 0, "reward": 0.25, "loss": 1.5, "step_time": 0.31, "train/samples_per_second": 40.0},
           {"step": 1, "reward": 0.5, "loss": 1.25, "step_time": 0.29, "train/samples_per_second": 41.0}]
    again = [{**row, "step_time": 9.0, "train/samples_per_second": 1.0} for row in run]   # another machine
    assert fingerprint(again) == fingerprint(run)
    # one other number anywhere in what the run logged is another run, with the same score or not
    other = [run[0], {**run[1], "loss": 1.2500001}]
    assert fingerprint(other) != fingerprint(run) and other[-1]["reward"] == run[-1]["reward"]
    assert fingerprint(run[:1]) != fingerprint(run)
    assert fingerprint([{"reward": float("nan")}]) == fingerprint([{"reward": float("nan")}])
    assert fingerprint([{"step": 0, "step_time": 0.3}]) == ""    # nothing but bookkeeping: no record


def test_runs_that_logged_no_number_are_said_so_never_called_seed_blind():
    from rlbisect.runs.judge import no_spread
    from rlbisect.runs.read import flatten
    lists = {s: [flatten({"step": [0, 1], "reward": [0.1 * s, 0.2], "loss": [0.3, 0.4]})] for s in range(3)}
    why = no_spread(lists, [0, 1, 2])
    assert why is not None and "logged no number: loss is a list, reward is a list" in why
    assert "the seed does not reach" not in why
    nan = {s: [{"step": 0, "reward": float("nan")}] for s in range(3)}
    assert "logged no number: reward is NaN" in (no_spread(nan, [0, 1, 2]) or "")
    blind = {s: [{"step": 0, "reward": 0.5}] for s in range(3)}         # numbers, the same: seed-blind
    assert "the seed does not reach the training run" in (no_spread(blind, [0, 1, 2]) or "")
    spread = {s: [{"step": 0, "reward": 0.5 + s}, {"step": 1, "reward": [1]}] for s in range(3)}
    assert no_spread({s: [flatten(r) for r in rows] for s, rows in spread.items()}, [0, 1, 2]) is None


def test_a_foreign_name_read_under_ours_is_judged_once():
    """verl's critic/score/mean is read as reward too: judged under both names, it counted twice."""
    from rlbisect.runs.judge import dashboard
    from rlbisect.runs.read import rename
    runs = [rename([{"step": 0, "critic/score/mean": 0.5, "actor/loss": 1.0}], {})]
    assert sorted(dashboard(runs)) == ["loss", "reward"]
    both = [rename([{"step": 0, "critic/score/mean": 0.5, "reward": 0.7}], {})]   # their own reward too
    assert sorted(dashboard(both)) == ["critic/score/mean", "reward"]


def test_a_metric_is_bookkeeping_by_its_words_never_by_a_substring():
    from rlbisect.runs.judge import bookkeeping
    # behaviour whose names hold "time", "per_s", "_ms" or "seed" inside a word: judged
    assert not any(map(bookkeeping, ["env/sentiment", "reward_per_step", "value_mse", "timeout_rate",
                                     "reseeded_frac"]))
    assert all(map(bookkeeping, ["train/stepTime", "tokens_per_sec", "summary/x", "random_seed", "n_seeds",
                                 "global_step", "wallclock_ms"]))
