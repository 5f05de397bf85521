"""The code changes a simulated history is made of: real edits to TinyAgent's source.

Benign edits preserve behaviour (a comment, a rename, a vectorization, an import reorder) and stay
out of the files the starting policy's cache key hashes (tasks, tokenizer, env, policy, base), so
every commit of a history reuses one cached policy. Each fault edit introduces one of the
chapter's faults as the change a real commit would make, at the place that bug lives — not by
flipping a `bug=` switch. An edit is a list of (file, old text, new text); `old` must occur
exactly once, so a change to the trainer that breaks a fixture fails loudly in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    message: str
    changes: tuple[tuple[str, str, str], ...]


BENIGN = [
    Edit("batch: say why old_logp needs no graph", (("batch.py",
         "    with torch.no_grad():\n        return trainer_log_probs(",
         "    with torch.no_grad():   # old_logp is a constant of the loss\n        return trainer_log_probs("),)),
    Edit("train: vectorize policy-token lengths", (("train.py",
         "lengths = [sum(1 for o in t.owner if o == 1) for t in trajs]",
         "lengths = [t.owner.count(1) for t in trajs]"),)),
    Edit("losses: say which bound the surrogate takes", (("losses.py",
         "        surrogate = pessimistic(ratio * adv, clipped * adv)",
         "        surrogate = pessimistic(ratio * adv, clipped * adv)   # [B, T-1]: the pessimistic bound"),)),
    Edit("update: sort imports", (("update.py",
         "from .losses import aggregate, entropy_from_logits, kl_penalty, policy_loss\n"
         "from .policy import selected_log_probs\n",
         "from .policy import selected_log_probs\n"
         "from .losses import aggregate, entropy_from_logits, kl_penalty, policy_loss\n"),)),
    Edit("sampler: comment the lockstep loop", (("sampler.py",
         "    while not all(env.done for env in envs):",
         "    # One position per iteration for every row: forced tokens first, then samples.\n"
         "    while not all(env.done for env in envs):"),)),
    Edit("losses: rename per_seq to per_episode", (("losses.py",
         "        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)     # [B]\n"
         "        if bug == \"seq_mean_padded\":   # divided by the padded width (d2l-ai/d2l-en#2707)\n"
         "            per_seq = (per_token * mask).sum(-1) / mask.shape[-1]\n"
         "        return per_seq.mean()",
         "        per_episode = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]\n"
         "        if bug == \"seq_mean_padded\":   # divided by the padded width (d2l-ai/d2l-en#2707)\n"
         "            per_episode = (per_token * mask).sum(-1) / mask.shape[-1]\n"
         "        return per_episode.mean()"),)),
    Edit("faults: point at the trainer modules", (("faults.py",
         '"""The code faults, each one switch',
         '"""(See batch.py, update.py and train.py for the branches.) The code faults, each one switch'),)),
    Edit("train: hoist the group size", (("train.py",
         "        row = {\"step\": step, **rollout_row(trajs, cfg.sampler.group_size), **update_stats}",
         "        group_size = cfg.sampler.group_size\n"
         "        row = {\"step\": step, **rollout_row(trajs, group_size), **update_stats}"),)),
    Edit("batch: document the padding value table", (("batch.py",
         "PADDED_KEYS = {",
         "# What each sequence tensor is padded with (None: the tokenizer's pad id).\nPADDED_KEYS = {"),)),
    Edit("update: explain the microbatch weights", (("update.py",
         "def _share(part_mask, mask, mode):",
         "def _share(part_mask, mask, mode):  # noqa: D401 -- weights sum to 1 over a minibatch"),)),
]

FAULTS = {
    "sign_flip": Edit("losses: inline the advantage normalization", (("losses.py",
        "    adv = (r - r.mean(dim, keepdim=True)) / (std + eps)",
        "    adv = (r.mean(dim, keepdim=True) - r) / (std + eps)"),)),
    "mask_shift": Edit("batch: build the action mask straight from the owner tensor", (("batch.py",
        '"action_mask": (owner[:, 1:] == OWNER["policy"]).float(),',
        '"action_mask": (owner[:, :-1] == OWNER["policy"]).float(),'),)),
    "stale_old_logp": Edit("update: compute old_logp per minibatch to save memory", (("update.py",
        '            if bug == "stale_old_logp":   # the no-grad forward moved inside the minibatch loop\n'
        "                old_logp = prepare_batch(model, batch, cfg)[1]",
        "            old_logp = prepare_batch(model, batch, cfg)[1]   # per minibatch: no [B, T] kept across steps"),)),
    "accum_local": Edit("update: accumulate over 4 length-bucketed microbatches", (("update.py",
        "        parts = rows.chunk(cfg.update.microbatches)\n"
        "        weights = [_share(mask[p], mask[rows], mode) for p in parts]",
        "        parts = rows[mask[rows].sum(-1).argsort()].chunk(4)   # similar lengths pad less\n"
        "        weights = [1 / len(parts)] * len(parts)"),)),
    "sampler_temp": Edit("sampler: engine defaults (temperature 0.7) and reuse its log-probs", (
        ("sampler.py", "    temp = sampler_cfg.temperature if temperature is None else temperature",
         "    temp = 0.7 if temperature is None else temperature   # the engine's default"),
        ("batch.py", '    if bug == "sampler_temp":     # trusting the inference engine\'s log-probs\n'
         '        old_logp = batch["sample_logp"]',
         '    old_logp = batch["sample_logp"]   # the engine already computed them: one forward fewer'))),
    "ref_is_policy": Edit("update: let the reference share the policy's weights", (("update.py",
        "    ref = copy.deepcopy(model).eval()\n    ref.requires_grad_(False)\n    return ref",
        "    return model   # same weights at step 0; saves a copy"),)),
    "entropy_sign": Edit("update: default entropy bonus", (("update.py",
        "    elif u.entropy_coef:\n        loss = loss - u.entropy_coef * entropy",
        "    else:   # keep exploring: a small entropy bonus by default\n"
        "        loss = loss + max(u.entropy_coef, ENTROPY_COEF) * entropy"),
        ("update.py", '    in_loss = bug == "entropy_sign" or u.entropy_coef > 0', "    in_loss = True"))),
    # Reward hacking by configuration: the public tests are what an exploit (hardcode_tests) can
    # pass, so training reward climbs while the hidden-test eval_pass falls. Only make_config's
    # default moves: EnvConfig's is in the starting-policy cache key, and the CLI, short_run and
    # the benchmarks all build their config through make_config.
    "public_reward": Edit("config: reward on the public tests by default (denser signal, faster runs)", (("config.py",
        'def make_config(*, seed: int = 0, reward: str = "hidden",',
        'def make_config(*, seed: int = 0, reward: str = "public",'),)),
    # A scale-only fault, the forgotten `loss / accumulation_steps` (karpathy/nanoGPT#168): with 4
    # microbatches the gradient is about 4x and grad_norm with it, the logged loss is unchanged, and
    # Adam's scale invariance keeps reward where it was; the clip acts at 1/4 of its setting.
    "loss_scale": Edit("update: accumulate over 4 microbatches by default; .grad does the summing", (
        ("config.py", 'microbatches: int = Field(1, ge=1,', 'microbatches: int = Field(4, ge=1,'),
        ("update.py", "        (w * loss).backward()",
         "        loss.backward()   # .grad sums over backward calls: the minibatch gradient, as the docs say"))),
}

# The faults the nine invariants catch (entropy_sign needs a training run: --predicate short-run).
INVARIANT_FAULTS = ["mask_shift", "stale_old_logp", "sign_flip", "accum_local", "sampler_temp", "ref_is_policy"]
