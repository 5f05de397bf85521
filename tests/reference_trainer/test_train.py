"""The acceptance numbers of the reference trainer, each fault against the healthy run of the same seed."""

import functools

import pytest

from reference_trainer.config import make_config
from reference_trainer.train import run
from rlbisect.metrics import METRICS, comparable

pytestmark = pytest.mark.slow   # they start torch processes or train: tests/conftest.py


@functools.lru_cache(maxsize=None)
def history(steps=24, bug=None, **knobs):
    return tuple(run(make_config(**knobs), steps, bug))


def mean(rows, key):
    return sum(r[key] for r in rows) / len(rows)


def test_rows_name_only_known_metrics_and_carry_the_required_keys():
    required = ("step reward pass_rate eval_pass entropy approx_kl clip_frac ratio_max ratio_min grad_norm length "
                "length_pass length_fail turns reads tests edits malformed hardcode submitted zero_adv_frac "
                "logp_gap loss_tokens").split()
    rows = history(6)
    assert all(k in rows[0] for k in required) and "kl_ref" not in rows[0]
    assert all(set(r) <= set(METRICS) | {"step", "step_time"} for r in rows)
    assert "eval_pass" not in rows[1] and "eval_pass" in rows[-1]
    assert "kl_ref" in history(2, kl_coef=0.1)[0]


def test_same_seed_same_rows_bit_for_bit_and_another_seed_differs():
    a, b = run(make_config(), 6), run(make_config(), 6)
    assert [comparable(r) for r in a] == [comparable(r) for r in b]
    c = run(make_config(seed=1), 6)
    assert [r["reward"] for r in c] != [r["reward"] for r in a]


def test_an_evaluation_is_of_the_policy_that_samples_its_step_and_the_last_of_the_trained_one(base, tok):
    # row k's reward is the policy before update k: its held-out pass rate must be of that policy
    # too (step 0: the starting policy), and the last row's of the policy the run ends with
    import copy

    import torch

    from reference_trainer.config import RLConfig
    from reference_trainer.tasks import make_tasks
    from reference_trainer.train import evaluate, train
    cfg, held_out = RLConfig(), make_tasks("heldout")[:3]
    model = copy.deepcopy(base)
    rows = train(model, make_tasks("train"), tok, cfg, 3, None, held_out, eval_every=2)
    assert [("eval_pass" in r) for r in rows] == [True, False, True]
    start = evaluate(copy.deepcopy(base), held_out, tok, cfg, torch.Generator().manual_seed(0))["pass_rate"]
    end = evaluate(model, held_out, tok, cfg, torch.Generator().manual_seed(2))["pass_rate"]
    assert rows[0]["eval_pass"] == start and rows[-1]["eval_pass"] == end
    one = train(copy.deepcopy(base), make_tasks("train"), tok, cfg, 1, None, held_out, eval_every=2)
    assert one[0]["eval_pass"] != start   # a one-step run evaluates what it trained, not where it began


def test_healthy_run_learns_to_read():
    h = history()
    # the chapter's curve, not a solved task set: hard tasks leave room to fail (0.66 there)
    assert h[0]["reward"] <= 0.3 and 0.55 <= mean(h[-4:], "reward") <= 0.85
    assert h[0]["eval_pass"] <= 0.25 and h[-1]["eval_pass"] >= 0.55
    assert mean(h[-4:], "reads") >= 2 * mean(h[:4], "reads")
    assert all(r["logp_gap"] < 1e-6 for r in h)


def test_public_reward_is_hacked():
    h = history(reward="public")
    assert mean(h[-4:], "reward") >= 0.8 and mean(h[-4:], "hardcode") >= 0.7 and h[-1]["eval_pass"] <= 0.1


def test_stale_old_logp_pins_clip_frac_and_ratio_max():
    assert all(r["clip_frac"] == 0 and r["ratio_max"] == 1 for r in history(bug="stale_old_logp"))
    assert any(r["clip_frac"] > 0 for r in history())


def test_ref_is_policy_gives_zero_kl_and_the_healthy_run():
    faulty, frozen = history(8, "ref_is_policy", kl_coef=0.1), history(8, kl_coef=0.1)
    assert all(r["kl_ref"] == 0 for r in faulty) and all(r["kl_ref"] > 0 for r in frozen)
    assert [r["reward"] for r in faulty] == [r["reward"] for r in history()[:8]]


def test_mask_shift_shows_in_logp_gap_from_step_0():
    assert history(8, "mask_shift")[0]["logp_gap"] > 1 and history()[0]["logp_gap"] < 1e-6


def test_sampler_temp_kills_exploration():
    h = history(bug="sampler_temp")
    assert mean(h[-4:], "zero_adv_frac") >= 0.8 and mean(h[-4:], "reads") < 0.1


def test_sign_flip_lowers_the_reward():
    h = history(8, "sign_flip")
    assert mean(h[-4:], "reward") < mean(h[:4], "reward")
    assert mean(history()[4:8], "reward") > mean(history()[:4], "reward")


def test_entropy_sign_collapses_entropy_before_the_policy_learns_to_read():
    # A converged healthy policy has low entropy too; what separates collapse is that reads vanish
    # and the flat groups are all-fail, not all-pass.
    faulty, healthy = history(bug="entropy_sign")[-4:], history()[-4:]
    assert mean(faulty, "entropy") < 0.1
    assert mean(faulty, "reads") < 0.1 <= mean(healthy, "reads")
    assert mean(faulty, "zero_adv_fail") > mean(healthy, "zero_adv_fail")


def test_lr_1e2_moves_the_policy_far_on_the_first_step():
    assert history(8, lr=1e-2)[0]["approx_kl"] >= 30 * history()[0]["approx_kl"]


def _length_bias_pair(seed):
    """Issue 14's five bars for the chapter's pair: 12 turns, 16 steps, one seed, only the loss
    aggregation differs."""
    token = history(16, seed=seed, max_turns=12)
    seq = history(16, seed=seed, max_turns=12, loss_mode="seq_mean_token_mean")
    return {"seq's failures grow": mean(seq[-4:], "length_fail") >= 1.5 * mean(seq[:4], "length_fail"),
            "longer than token_mean's": mean(seq[-4:], "length_fail") >= 1.3 * mean(token[-4:], "length_fail"),
            "more turns": mean(seq[-4:], "turns") > mean(token[-4:], "turns"),
            # ... while neither the training reward nor the held-out pass rate tells the runs apart
            "same reward": abs(mean(seq[-4:], "reward") - mean(token[-4:], "reward")) <= 0.1,
            "same held-out": abs(seq[-1]["eval_pass"] - token[-1]["eval_pass"]) <= 0.1}


def test_length_bias_failing_episodes_grow_more_under_seq_mean_token_mean():
    # Seed 1; the pair holds on 7 of seeds 0-7, on seed 0 just (docs/tinyagent.md, bench_length_bias.py)
    bars = _length_bias_pair(1)
    assert all(bars.values()), bars


@pytest.mark.slow
def test_length_bias_pair_acceptance_on_two_of_three_seeds():
    assert sum(all(_length_bias_pair(seed).values()) for seed in (0, 1, 2)) >= 2
