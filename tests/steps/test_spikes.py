"""Each detector fires on the faulty stream it exists for and stays silent on a healthy one.

Streams are synthetic but follow healthy reference-trainer runs, tails included (approx_kl falls
to ~1e-6 as the policy converges, with single steps up to 0.037; grad_norm steps up to 6x its
median), and the fault signatures the chapter describes.
"""

from __future__ import annotations

import math
import random

import pytest
from pydantic import ValidationError

from rlbisect.steps.spikes import (CeilingRule, DetectorSet, Hit, MadRule, SpikeConfig, StuckRule,
                             default_detectors)


def healthy(seed: int = 0, steps: int = 24, kl_ref: bool = True) -> list[dict]:
    """Per-step rows inside the healthy reference ranges; step 0 has the largest approx_kl."""
    rng = random.Random(seed)
    rows = []
    for step in range(steps):
        late = min(step / 30, 1.0)  # approx_kl drifts from ~1e-3 to ~1e-5 as entropy collapses
        row = {
            "step": step,
            "logp_gap": 10 ** rng.uniform(math.log10(7e-9), math.log10(1e-7)),
            "approx_kl": 3e-3 if step == 0 else 10 ** rng.uniform(-4 - 2 * late, -2.5 - 2 * late),
            "clip_frac": 0.0 if rng.random() < 0.5 else rng.uniform(1e-4, 0.014),
            "ratio_max": rng.uniform(1.03, 1.27),
            "grad_norm": rng.uniform(0.16, 0.29),
            "loss": rng.uniform(-0.01, 0.01),
            "reward": 0.17 + 0.02 * step,
            "step_time": rng.uniform(0.5, 2.0),
        }
        if kl_ref:
            row["kl_ref"] = rng.uniform(0.003, 0.057)
        rows.append(row)
    for step in (17, steps - 2):  # healthy outliers seen on the reference trainer
        rows[step].update(approx_kl=0.037, grad_norm=6 * 0.22, ratio_max=2.35, clip_frac=0.028)
    return rows


def with_fault(rows: list[dict], **per_step) -> list[dict]:
    """Copy of `rows` where each keyword is a value for every step, or a list of values by step."""
    out = []
    for i, row in enumerate(rows):
        row = dict(row)
        for k, v in per_step.items():
            if isinstance(v, list):
                if i < len(v):
                    row[k] = v[i]
            else:
                row[k] = v
        out.append(row)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_healthy_runs_are_silent(seed):
    assert default_detectors().scan(healthy(seed)) == []
    assert default_detectors().scan(healthy(seed, steps=300, kl_ref=False)) == []


@pytest.mark.parametrize("fault, signal, detector", [
    (dict(logp_gap=3.7, logp_gap_max=9.0), "logp_gap", "ceiling:logp_gap"),  # mask_shift
    (dict(logp_gap=0.075, ratio_max=2.65), "logp_gap", "ceiling:logp_gap"),  # sampler_temp
    (dict(approx_kl=[0.31, 0.064, 0.005] + [0.004] * 21), "approx_kl", "ceiling:approx_kl"),  # lr 1e-2
])
def test_step0_faults_fire_at_step0_naming_the_signal(fault, signal, detector):
    hits = default_detectors().scan(with_fault(healthy(), **fault))
    assert [(h.detector, h.signal, h.step) for h in hits] == [(detector, signal, 0)]
    assert signal in hits[0].message and "ceiling" in hits[0].message


def test_stale_old_logp_fires_once_after_k_steps():
    hits = default_detectors().scan(with_fault(healthy(), clip_frac=0.0, ratio_max=1.0))
    assert [(h.detector, h.step) for h in hits] == [("stuck:no_clipping", 3)]
    assert hits[0].message.startswith("clip_frac == 0 and ratio_max == 1 for 4 steps")
    assert hits[0].signal == "clip_frac+ratio_max"


def test_clip_frac_zero_alone_is_not_stuck():
    # Healthy runs have clip_frac exactly 0 in about half the steps, with ratio_max still > 1.
    rows = with_fault(healthy(), clip_frac=0.0)
    assert default_detectors().scan(rows) == []


def test_kl_ref_zero_fires_only_while_present():
    hits = default_detectors().scan(with_fault(healthy(), kl_ref=0.0))  # ref_is_policy
    assert [(h.detector, h.signal, h.step) for h in hits] == [("stuck:kl_ref_zero", "kl_ref", 1)]
    assert "kl_ref == 0 for 2 steps" in hits[0].message
    assert default_detectors().scan(healthy(kl_ref=False)) == []  # kl_coef = 0: nothing logged
    # Exactly 0 on every other step (a reference refreshed from the policy every other step) fires
    # too: 2 of the last 4 steps.
    rows = [dict(r, kl_ref=0.0) if i % 2 else r for i, r in enumerate(healthy())]
    hits = default_detectors().scan(rows)
    assert [(h.detector, h.step) for h in hits] == [("stuck:kl_ref_zero", 3)]
    assert "2 of the last 4 steps" in hits[0].message
    # one zero is not a pattern
    assert default_detectors().scan([dict(r, kl_ref=0.0) if i == 5 else r for i, r in enumerate(healthy())]) == []


def test_clip_frac_pinned_at_one_fires():
    hits = default_detectors().scan(with_fault(healthy(), clip_frac=[0.01, 1.0, 1.0, 1.0]))
    assert [(h.detector, h.step) for h in hits] == [("stuck:clip_saturated", 2)]
    assert default_detectors().scan(with_fault(healthy(), clip_frac=[0.01, 1.0, 0.5])) == []


def test_grad_norm_climbing_step_after_step_fires_where_a_spike_rule_is_silent():
    climb = [0.2 * 1.3 ** i for i in range(24)]   # +30% a step: never a 10-MAD spike
    hits = default_detectors().scan(with_fault(healthy(), grad_norm=climb))
    assert [(h.detector, h.step) for h in hits][0] == ("trend:grad_norm", 6)   # long before any spike
    assert "rose 6 steps in a row, 0.2 -> 0.965 (4.8x)" in hits[0].message
    wobble = [0.2 * (1.3 if i % 2 else 1.0) * 1.05 ** i for i in range(24)]   # rises, but not steadily
    assert [h for h in default_detectors().scan(with_fault(healthy(), grad_norm=wobble))
            if h.detector.startswith("trend")] == []


def test_approx_kl_growing_beyond_its_early_level_fires_under_the_ceiling():
    grown = [0.002] * 4 + [0.002 * 1.5 ** i for i in range(20)]
    rows = with_fault(healthy(), approx_kl=[min(x, 0.09) for x in grown])   # never above the 0.1 ceiling
    hits = [h for h in default_detectors().scan(rows) if h.signal == "approx_kl"]
    assert [h.detector for h in hits] == ["relative:approx_kl"] and "early level 0.002" in hits[0].message
    # single healthy outliers (0.037 at steps 17 and 22) never move the median of the last 4
    assert default_detectors().scan(healthy()) == []


def test_rules_know_the_trainers_shape():
    """One optimizer step per batch: the ratio is 1 by construction, so 'no clipping' is no fault."""
    flat = with_fault(healthy(), clip_frac=0.0, ratio_max=1.0)
    assert [h.detector for h in DetectorSet.from_config(SpikeConfig.for_trainer(4)).scan(flat)] == ["stuck:no_clipping"]
    assert DetectorSet.from_config(SpikeConfig.for_trainer(1)).scan(flat) == []


def test_mad_spike_mid_run_and_not_before_warmup():
    spiked = healthy()
    spiked[15]["grad_norm"] = 6.0  # 27x the median
    hits = default_detectors().scan(spiked)
    assert [(h.detector, h.step) for h in hits] == [("mad:grad_norm", 15)]
    assert hits[0].message.startswith("grad_norm 6 > 20 x MAD above running median 0.2")
    assert "floored to 0.2" in hits[0].message  # MAD ~0.03: the median floor set the scale
    lone = healthy()
    lone[15]["grad_norm"] = 3.2  # 15x: a healthy run's own single-step spike (spike_rules.py)
    assert [h for h in default_detectors().scan(lone) if h.detector.startswith("mad")] == []
    early = healthy()
    early[3]["grad_norm"] = 5.0  # only 3 steps of history: below warm-up, no MAD verdict
    assert [h for h in default_detectors().scan(early) if h.detector.startswith("mad")] == []


def test_logp_gap_mad_respects_noise_floor():
    rows = healthy()
    rows[12]["logp_gap"] = 4e-7  # 10x the median but still float noise (< 1e-6): silent
    assert default_detectors().scan(rows) == []
    rows[12]["logp_gap"] = 5e-5  # a real drift, still far below the 1e-3 ceiling
    assert [h.detector for h in default_detectors().scan(rows)] == ["mad:logp_gap"]


def test_nonfinite_any_numeric_key_once_per_episode():
    rows = healthy()
    for i in (5, 6, 7):
        rows[i]["loss"] = float("nan")
    rows[9]["entropy"] = float("inf")
    rows[11]["loss"] = float("nan")  # cleared at steps 8-10: fires again
    hits = default_detectors().scan(rows)
    assert [(h.detector, h.signal, h.step) for h in hits] == [
        ("nonfinite", "loss", 5), ("nonfinite", "entropy", 9), ("nonfinite", "loss", 11)]
    assert hits[0].message == "loss is nan"


def test_edge_triggered_rearms_after_clearing():
    gaps = [2.0, 2.0, 1e-8, 1e-8, 2.0] + [1e-8] * 19
    hits = default_detectors().scan(with_fault(healthy(), logp_gap=gaps))
    assert [h.step for h in hits] == [0, 4]


def test_config_is_editable_and_validated():
    cfg = SpikeConfig(ceilings=[CeilingRule(signal="grad_norm", above=0.25)], mad=[], stuck=[])
    hits = DetectorSet.from_config(cfg).scan(healthy())
    assert hits and all(h.detector == "ceiling:grad_norm" for h in hits)
    with pytest.raises(ValidationError, match="unknown metric 'gradnorm'"):
        MadRule(signal="gradnorm")
    with pytest.raises(ValidationError, match="unknown metric"):
        StuckRule(name="x", values={"clipfrac": 0.0})
    with pytest.raises(ValidationError):
        SpikeConfig(nonfinite=True, bogus=1)
    # Round trip through JSON, so a calibrated set can live in a file.
    assert SpikeConfig.model_validate_json(SpikeConfig().model_dump_json()) == SpikeConfig()


def test_every_config_field_is_documented():
    for model in (SpikeConfig, MadRule, CeilingRule, StuckRule):
        undocumented = [n for n, f in model.model_fields.items() if not f.description]
        assert undocumented == [], model.__name__


def test_hit_round_trips_as_dict():
    hit = Hit("ceiling:approx_kl", "approx_kl", 0, 0.31, "approx_kl 0.31 > ceiling 0.05")
    assert Hit.from_dict(hit.to_dict()) == hit


def test_detector_sets_do_not_share_state():
    a, b = default_detectors(), default_detectors()
    for step in range(3):
        a.update(step, {"clip_frac": 0.0, "ratio_max": 1.0})
    assert [h.detector for h in a.update(3, {"clip_frac": 0.0, "ratio_max": 1.0})] == ["stuck:no_clipping"]
    assert b.update(0, {"clip_frac": 0.0, "ratio_max": 1.0}) == []


def test_a_huge_jump_inside_the_warm_up_fires_and_noise_does_not():
    from rlbisect.steps.spikes import MadSpike
    from rlbisect.steps.spike_rules import MadRule
    rule = MadRule(signal="grad_norm", k=20.0)
    spiky = MadSpike(rule)
    hits = [h for step, x in enumerate([0.2, 0.25, 0.21, 0.19, 0.22, 220.0]) for h in spiky.update(step, {"grad_norm": x})]
    assert [(h.step, h.detector) for h in hits] == [(5, "mad:grad_norm")] and "inside the warm-up" in hits[0].message
    calm = MadSpike(rule)
    assert not [h for step, x in enumerate([0.2, 1.5, 0.3, 3.0, 0.2]) for h in calm.update(step, {"grad_norm": x})]
    noise = MadSpike(MadRule(signal="logp_gap", min_value=1e-6))   # float noise jumps 100x, below the floor
    assert not [h for step, x in enumerate([1e-9, 1e-7, 2e-9]) for h in noise.update(step, {"logp_gap": x})]
