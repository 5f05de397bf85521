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
