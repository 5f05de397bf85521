"""The verl adapter on real verl: every applicable check passes on verl's unmodified actor code,
and each fault switched into it (each modelled on a report in verl's tracker) fails the check meant
for it and no check without it."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.slow    # each builds verl's engine and runs its update (a few seconds)

from rlbisect.check.invariants import sanity_checks  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _run(bug=None, **opts):
    from rlbisect.frameworks.verl import demo
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return sanity_checks(demo(bug=bug, **opts))


def _check(results, number: int):
    return list(results.values())[number - 1]


@pytest.fixture(scope="module")
def healthy():
    return _run()


def test_unmodified_verl_passes_every_applicable_check(healthy):
    failed = {r.name: r.value for r in healthy.values() if r.failed}
    assert not failed, failed
    na = {n for n in range(1, len(healthy) + 1) if _check(healthy, n).na}
    assert na == {21, 22, 23, 24}       # verl has no environment contract or scheduler probe here
    assert _check(healthy, 8).value > 0.3 and _check(healthy, 9).value > 0 and _check(healthy, 11).value > 0


# fault -> (the setting it is checked at, the check meant to catch it)
FAULTS = [
    ("microbatch_token_mean", {}, 6),
    ("accum_unscaled", {}, 6),
    ("logp_untempered", {"temperature": 0.7}, 2),
    ("entropy_untempered", {}, 19),
    ("kl_reversed", {}, 19),
    ("pad_in_mask", {}, 13),
    ("eos_unmasked", {}, 1),
    ("std_flag_ignored", {"norm_adv_by_std_in_grpo": False}, 18),
    ("ref_is_policy", {}, 9),
]


@pytest.mark.parametrize("bug,opts,number", FAULTS)
def test_each_fault_fails_the_check_meant_for_it(bug, opts, number):
    faulty, clean = _run(bug, **opts), _run(**opts)
    assert not _check(faulty, number).passed, (bug, _check(faulty, number))
    assert not any(r.failed for r in clean.values()), {r.name: r.value for r in clean.values() if r.failed}
    assert not _check(clean, number).na


def test_every_fault_is_tested():
    from rlbisect.frameworks.verl import tiny
    assert sorted(tiny.FAULTS) == sorted(f for f, _, _ in FAULTS)


def test_the_variant_splits_unevenly_and_holds_every_identity():
    """The variant's dynamic batch size cuts the batch into micro-batches of unequal row counts and
    check 6's rows into micro-batches of unequal token counts, through verl's own
    `prepare_micro_batches` (a fixed micro-batch size must divide the rows: verl asserts it); every
    check passes there, and the per-micro-batch normaliser fails check 6 there."""
    from verl.workers.engine.utils import prepare_micro_batches

    from rlbisect.frameworks.verl import demo
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (label,) = demo().variants
        a = demo(**demo().variants[label])
        batch, _ = a.probe_batch()
        micro, _ = prepare_micro_batches(a._nopad(batch["td"], len(batch["td"])))
        quarter, _ = prepare_micro_batches(a._nopad(batch["td"][:4], 4))
    assert len({len(m) for m in micro}) > 1, [len(m) for m in micro]
    assert len({int(m["loss_mask"].sum()) for m in quarter}) > 1
    at = _run(**demo().variants[label])
    assert not any(r.failed for r in at.values())
    # at token-mean (verl#5625: the row share is right for the seq-mean modes, wrong for token-mean)
    assert not _check(_run("microbatch_token_mean", **{**demo().variants[label], "loss_agg_mode": "token-mean"}), 6).passed


def test_settings_that_change_the_objective_on_purpose():
    """seq-mean-token-sum-norm without loss_scale_factor divides by the padded horizon (check 5 by
    design, the objective a kind; with one, stated); reinforce++ whitens over the batch (checks 4 and
    12 by design; a kind)."""
    norm = _run(loss_agg_mode="seq-mean-token-sum-norm")
    assert "loss_scale_factor" in _check(norm, 5).by_design and not any(r.failed for r in norm.values())
    assert _check(norm, 19).na
    fixed = _run(loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=6)
    assert not _check(fixed, 5).by_design and _check(fixed, 5).passed and _check(fixed, 19).passed
    rpp = _run(adv_estimator="reinforce_plus_plus")
    assert _check(rpp, 12).by_design and not any(r.failed for r in rpp.values())


@pytest.mark.parametrize("opts", [{"loss_agg_mode": "seq-mean-token-sum"},
                                  {"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 6}])
def test_the_seq_mean_token_sum_modes_are_stated_and_a_fault_in_them_fails_check_19(monkeypatch, opts):
    """verl's seq-mean-token-sum modes (the second Dr. GRPO's, with a constant horizon) were kinds, so
    each row's token mean taken for its sum, or loss_scale_factor left out, passed every check; each
    fails check 19 now."""
    import verl.trainer.ppo.core_algos as core_algos

    from rlbisect.frameworks.verl import demo
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        a = demo(**opts)
    assert a.objective.aggregation == "seq_mean_token_sum" and a.objective.sum_norm == opts.get("loss_scale_factor", 1)
    healthy = _run(**opts)
    assert not any(r.failed for r in healthy.values()) and _check(healthy, 19).passed
    agg = core_algos.agg_loss

    def faulty(loss_mat, loss_mask, loss_agg_mode, *args, **kwargs):
        if loss_agg_mode == "seq-mean-token-sum":         # each row's token mean, not its sum
            return agg(loss_mat, loss_mask, "seq-mean-token-mean", *args, **kwargs)
        out = agg(loss_mat, loss_mask, loss_agg_mode, *args, **kwargs)
        return out * (kwargs.get("loss_scale_factor") or 1) if loss_agg_mode == "seq-mean-token-sum-norm" else out
    monkeypatch.setattr(core_algos, "agg_loss", faulty)
    assert not _check(_run(**opts), 19).passed


def test_a_setting_this_verl_refuses_is_refused_when_the_adapter_is_built():
    from rlbisect.frameworks.verl import demo
    for key in ("loss_agg_mode", "adv_estimator", "kl_loss_type"):
        with pytest.raises(ValueError, match=f"does not accept {key}='no-such'"):
            demo(**{key: "no-such"})


def test_verl_missing_a_needed_name_cannot_run(monkeypatch):
    from rlbisect.check.loading import AdapterUnfit
    from rlbisect.frameworks.verl import _internals
    monkeypatch.setattr(_internals, "NEEDS", (*_internals.NEEDS, ("verl.workers.utils.losses", "gone_in_this_verl")))
    with pytest.raises(AdapterUnfit, match="lacks verl.workers.utils.losses.gone_in_this_verl"):
        _internals.require_verl()


def test_the_demo_command_passes_within_a_minute():
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rlbisect", "check", "--adapter", "rlbisect.frameworks.verl:demo"],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "FAILED" not in done.stdout and "checks passed" in done.stdout
    assert time.perf_counter() - t < 60
