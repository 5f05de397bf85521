"""``--plot``: which figures a bisect draws, and what the noisy searches' figure is drawn from."""

import math

from rlbisect.bisect.report import BisectResult, ProbeRecord
from rlbisect.bisect.timeline import bisect_evidence, draw, measured_points
from rlbisect.errors import Cause, Status

PNG = b"\x89PNG\r\n\x1a\n"
SHAS = [f"{i:02d}" + "a" * 38 for i in range(6)]


def probe(commit: str, verdict: str = "good", cause=Cause.MEASURED, role: str = "", **values) -> ProbeRecord:
    return ProbeRecord(0, commit, verdict, 0.1, dict(values), "", False, "", "", 0.0, role=role,
                       detail={"fingerprint": "f"} if cause is Cause.MEASURED else {}, cause=cause)


def measured_result(probes, status=Status.FOUND, first_bad=SHAS[3]) -> BisectResult:
    return BisectResult(SHAS[0], SHAS[-1], strategy="measured", status=status, first_bad=first_bad,
                        history=[(s, ()) for s in SHAS], probes=probes,
                        extra={"metric": "reward", "direction": "lower",
                               "posterior": [{"commit": SHAS[3], "p": 0.98},
                                             {"commit": "nothing changed in the range", "p": 0.01}],
                               "sides": {"before": {"runs": 3, "median": 1.0}, "after": {"runs": 3, "median": -1.0}}})


def test_a_measured_culprit_has_no_per_seed_panel_and_does_not_break_the_plot(tmp_path):
    # a measured run's detail is its fingerprint, not per-seed scores: nothing to draw there (this
    # drew an empty grid and raised after the bisect had answered, losing its summary and exit code)
    runs = [probe(SHAS[i], reward=1.0 - 2 * (i >= 3), seed=0.0) for i in range(6)]
    result = measured_result(runs)
    assert bisect_evidence(result, tmp_path / "e.png") is None and not (tmp_path / "e.png").exists()
    drawn = draw(result, tmp_path / "plot.png")
    assert drawn == [(tmp_path / "plot.png", "")] and (tmp_path / "plot.png").read_bytes()[:8] == PNG


def test_the_measured_figure_shows_every_run_the_search_used_crashes_at_the_worst_edge():
    per_commit = probe(SHAS[2], cause=Cause.FAILED, role="per-commit", seeds=3.0)
    per_commit.detail = {"seeds": [0, 1], "metrics": [{"metric": "reward", "good": [1.1, 0.9], "probe": [1.0, 1.2]}]}
    runs = [per_commit, probe(SHAS[4], reward=-1.0, seed=0.0), probe(SHAS[5], "bad", Cause.RAISED),
            probe(SHAS[1], "skip", Cause.CANNOT_RUN), probe(SHAS[3], "abort", Cause.EXIT_CODE)]
    points = measured_points(measured_result(runs), "reward")
    assert points == [(SHAS[0], 1.1), (SHAS[0], 0.9), (SHAS[2], 1.0), (SHAS[2], 1.2), (SHAS[4], -1.0),
                      (SHAS[5], -math.inf)]
    higher = measured_result(runs)
    higher.extra["direction"] = "higher"
    assert measured_points(higher, "reward")[-1] == (SHAS[5], math.inf)


def test_a_binary_noisy_search_draws_one_figure_and_a_plain_bisect_its_timeline(tmp_path):
    flaky = [probe(SHAS[i], "bad" if i >= 3 and i % 2 else "good", Cause.EXIT_CODE) for i in range(6) for _ in range(3)]
    result = BisectResult(SHAS[0], SHAS[-1], strategy="posterior", status=Status.UNSURE, history=[(s, ()) for s in SHAS],
                          probes=flaky, extra={"posterior": [{"commit": SHAS[3], "p": 0.6},
                                                             {"commit": "no regression in range", "p": 0.2}]})
    assert draw(result, tmp_path / "flaky.png") == [(tmp_path / "flaky.png", "")]
    assert (tmp_path / "flaky.png").read_bytes()[:8] == PNG
    plain = BisectResult(SHAS[0], SHAS[-1], status=Status.FOUND, first_bad=SHAS[3], history=[(s, ()) for s in SHAS],
                         probes=[probe(SHAS[3], "bad", Cause.EXIT_CODE)])
    assert [p.name for p, _ in draw(plain, tmp_path / "t.png")] == ["t.png"]
