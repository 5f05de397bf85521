"""Reproduce the chapter's runs on TinyAgent and print each as mean(first 4 steps) -> mean(last 4),
plus the final held-out pass rate (seed 0; the length-bias pair on seed 1). Usage: python benchmarks/signatures.py   (about a minute)"""

from __future__ import annotations

from reference_trainer.config import make_config
from reference_trainer.train import run

RUNS = [  # name, steps, bug, config knobs, metrics shown
    ("healthy", 24, None, {}, ["reward", "reads", "entropy", "logp_gap", "clip_frac", "ratio_max", "grad_norm"]),
    ("mask_shift", 24, "mask_shift", {}, ["reward", "logp_gap", "clip_frac", "ratio_max", "grad_norm"]),
    ("stale_old_logp", 24, "stale_old_logp", {}, ["reward", "clip_frac", "ratio_max", "approx_kl"]),
    ("sampler_temp", 24, "sampler_temp", {}, ["reward", "logp_gap", "reads", "zero_adv_frac"]),
    ("sign_flip", 8, "sign_flip", {}, ["reward", "approx_kl", "turns"]),
    ("lr 1e-2", 8, None, {"lr": 1e-2}, ["reward", "approx_kl", "malformed", "entropy"]),
    ("accum_local", 24, "accum_local", {}, ["reward", "grad_norm", "malformed"]),
    ("entropy_sign", 24, "entropy_sign", {}, ["reward", "entropy", "reads", "zero_adv_fail"]),
    # the length-bias pair on RL seed 1, the clearest of 0-2; on seed 0 it holds at 1.30x, on the
    # bar (bench_length_bias.py runs the pair seed by seed)
    ("12 turns", 16, None, {"max_turns": 12, "seed": 1}, ["reward", "length_pass", "length_fail", "turns", "reads"]),
    ("length bias", 16, None, {"max_turns": 12, "seed": 1, "loss_mode": "seq_mean_token_mean"},
     ["reward", "length_pass", "length_fail", "turns", "reads"]),
    ("public reward", 24, None, {"reward": "public"}, ["reward", "pass_rate", "hardcode", "reads"]),
    ("KL 0.1", 8, None, {"kl_coef": 0.1}, ["reward", "kl_ref"]),
    ("ref_is_policy", 8, "ref_is_policy", {"kl_coef": 0.1}, ["reward", "kl_ref"]),
]


def main() -> None:
    for name, steps, bug, knobs, keys in RUNS:
        h = run(make_config(**knobs), steps, bug)
        mean = lambda k, part: sum(r[k] for r in part) / len(part)  # noqa: E731
        cells = " | ".join(f"{k} {mean(k, h[:4]):.3g} -> {mean(k, h[-4:]):.3g}" for k in keys)
        print(f"{name:<15}| {cells} | held-out {h[0]['eval_pass']:.2f} -> {h[-1]['eval_pass']:.2f}", flush=True)


if __name__ == "__main__":
    main()
