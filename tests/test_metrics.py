from pathlib import Path

from rlbisect.metrics import GROUPS, METRICS, by_group, comparable, is_timing

DOC = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()


def test_every_metric_has_a_group_and_a_doc_and_is_in_the_metrics_page():
    for m in METRICS.values():
        assert m.group in GROUPS and m.doc
        assert f"`{m.name}" in DOC, f"{m.name} is not documented in docs/metrics.md's metric table"
    assert sum(len(by_group(g)) for g in GROUPS) == len(METRICS)


def test_only_time_keys_are_excluded_from_comparisons():
    row = {"reward": 0.5, "step_time": 1.23, "step": 3}
    assert comparable(row) == {"reward": 0.5, "step": 3}
    assert is_timing("step_time") and not is_timing("reward")


def test_a_timing_key_is_told_by_its_words_not_by_a_substring():
    timing = ["step_time", "train/update_time", "elapsed_s", "tokens_per_sec", "samples_per_second",
              "throughput", "train/stepTime", "time/rollout", "t_ms", "it_per_s", "timestamp"]
    behaviour = ["env/sentiment", "reward_per_step", "value_mse", "timeout_rate", "rms_error", "reward",
                 "optimizer/lr", "episode_len"]
    assert [k for k in timing if not is_timing(k)] == []
    assert [k for k in behaviour if is_timing(k)] == []
    assert comparable({"tokens_per_sec": 9.1, "env/sentiment": 0.8}) == {"env/sentiment": 0.8}
