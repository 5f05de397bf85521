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
