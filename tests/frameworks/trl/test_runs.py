"""The run-level checks on TRL: short runs of GRPOTrainer.train() watched through the tap."""

from __future__ import annotations

import contextlib
import io
import warnings

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.slow     # they train (transformers and TRL): tests/conftest.py

from rlbisect.check.run_level import run_checks  # noqa: E402
from rlbisect.check.spec import Schedule  # noqa: E402

REF = "reference log-probs = the starting policy's"


def _runs(**opts):
    from rlbisect.frameworks.trl.adapter import demo
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return run_checks(demo(**opts))


@pytest.fixture(scope="module")
def healthy():
    return _runs()


def test_unmodified_trl_passes_the_run_level_checks(healthy):
    failed = {r.name: r.value for r in healthy.values() if r.failed}
    assert not failed, failed
    na = {r.name for r in healthy.values() if r.na}
    assert na == {"evaluation: held-out tasks, weights untouched", "evaluation leaves training alone"}   # no eval dataset
    assert healthy[REF].value < 1e-6 and healthy["optimizer = the configured one"].value == 0


@pytest.mark.parametrize("bug,check", [("ref_is_policy", REF),
                                       ("reward_weight_ignored", "rewards = the configured reward rule, every step"),
                                       ("adv_sign", "mask and advantages = the step's batch")])
def test_a_fault_fails_its_run_level_check(healthy, bug, check):
    assert not _runs(bug=bug)[check].passed
    assert healthy[check].passed and not healthy[check].na


def test_the_logged_reward_without_reward_weights_fails_the_logged_metrics(healthy, monkeypatch):
    """trl#5352, written back into TRL 1.16: the logged reward the unweighted sum of the reward
    functions (TRL 0.29's, where the demo's weights 1 and 0.1 make it differ) passed every check."""
    from tests.frameworks.trl.test_declared import _trl_edited
    logged = "logged metrics = the step's batch"
    assert healthy[logged].passed and not healthy[logged].na
    _trl_edited(monkeypatch, "rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device)"
                             ".unsqueeze(0)).nansum(dim=1)", "rewards = rewards_per_func.nansum(dim=1)")
    res = _runs()
    assert [n for n, r in res.items() if r.failed] == [logged]
    assert res[logged].detail.startswith("reward at step 0")


def test_trls_zero_std_fraction_under_batch_scaling_fails_the_logged_metrics(healthy):
    """TRL documents `frac_reward_zero_std` as the share of samples whose prompt's rewards do not
    vary; under scale_rewards="batch" it logs whether the whole batch's std is zero instead (its
    std_rewards there is the batch's), so a batch with groups that teach nothing logs 0. Unmodified
    TRL 1.16, caught by the logged-metrics check alone; at the default (group) scaling it passes."""
    logged = "logged metrics = the step's batch"
    assert healthy[logged].passed and not healthy[logged].na
    res = _runs(scale_rewards="batch")
    assert [n for n, r in res.items() if r.failed] == [logged]
    assert res[logged].detail.startswith("zero_adv_frac at step 0: logged 0,")


def test_a_token_count_that_includes_dropped_completions_fails_at_a_token_summed_loss():
    # huggingface/trl#6369: dapo divided by a count that kept the truncated completions it masks
    opts = {"loss_type": "dapo", "mask_truncated_completions": True}
    name = "mask and advantages = the step's batch"
    healthy, faulty = _runs(**opts), _runs(bug="items_count_truncated", **opts)
    assert healthy[name].passed and not healthy[name].na
    assert not faulty[name].passed and faulty[name].value >= 1       # whole tokens miscounted
    assert [r.name for r in faulty.values() if r.failed] == [name]


def test_the_run_spec_is_read_from_the_training_arguments():
    from rlbisect.frameworks.trl.adapter import demo
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        a = demo(lr=3e-4)
        spec = a.run_spec(5, {"lr_scheduler_type": "cosine", "warmup_steps": 2, "max_grad_norm": 0.5})
    assert spec.optimizer == "AdamW" and spec.lr == 3e-4 and spec.max_grad_norm == 0.5
    assert spec.hyper == {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
    assert spec.schedule == Schedule(kind="cosine", warmup=2, total=5, warmup_from_zero=True)
    assert spec.train_tasks == frozenset(range(48))


def test_a_short_run_on_the_adapters_own_untouched_trainer_logs_what_a_fresh_one_does():
    # the demo's first short run trains the trainer the adapter was built with (GRPOAdapter.spare),
    # every later one a fresh build: the rows must not tell them apart
    from rlbisect.frameworks.trl.adapter import demo
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        adapter = demo(seed=3)
        own = adapter.train_run(2, 5, 10 ** 6)
        assert adapter.spare() is None                   # spent
        again = adapter.train_run(2, 5, 10 ** 6)
        touched = demo(seed=3)
        touched.trainer                                  # read before any run: no longer spare
        assert touched.spare() is None
    from rlbisect.metrics import is_timing

    def numbers(rows):
        return [{k: v for k, v in row.items() if not is_timing(k)} for row in rows]
    assert numbers(own) == numbers(again) and len(own) == 2


def test_the_checks_beside_each_other_give_what_they_give_one_after_another(monkeypatch):
    # beside: runs A and A' in a forked child, A on the adapter's untouched trainer; one after
    # another: A after the step-0 checks spent it, on a fresh build
    import rlbisect._proc.forked as forked
    from rlbisect.check.invariants import as_json, check_seeds
    from rlbisect.frameworks.trl.adapter import demo
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        beside = check_seeds(lambda seed: demo(seed=seed), [1], runs=True)
        alone = check_seeds(lambda seed: demo(seed=seed), [1], runs=True, beside=False)
    assert as_json(beside) == as_json(alone) and not any(r.failed for r in beside.values())
