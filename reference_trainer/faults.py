"""The code faults, each one switch (`bug=`) at the place that bug lives.

The chapter's seven:

    mask_shift      batch.prepare_batch     action mask aligned to ids instead of ids[1:]
    stale_old_logp  update.rl_update        old_logp recomputed from the current weights per minibatch
    entropy_sign    update.minibatch_backward  entropy bonus added with the wrong sign (a penalty)
    sign_flip       batch.prepare_batch     advantages negated
    accum_local     update.minibatch_backward  4 length-sorted microbatches, each token_mean / 4
    sampler_temp    train.train + batch.prepare_batch  sampler at 0.7, its log-probs used as old_logp
    ref_is_policy   update.make_ref         the KL reference is the live policy object

The catalogue beyond the chapter (`CATALOGUE`): realistic one-to-three-line faults modelled on bug
reports and fixes in TRL, verl, OpenRLHF and similar trainers; each branch cites its report. Some
only bite off the default setting: `NEEDS` says which setting (the CLI flag or config field).

The configuration failures (lr 1e-2, the public reward, seq_mean_token_mean with 12 turns) run
correct code and need no switch.
"""

CHAPTER = {
    "mask_shift": "action mask aligned to ids instead of ids[1:]: each policy span moves one token right",
    "stale_old_logp": "old_logp recomputed from the current weights before every minibatch",
    "entropy_sign": "entropy bonus added with the wrong sign: an entropy penalty of ENTROPY_COEF",
    "sign_flip": "advantages negated",
    "accum_local": "minibatch accumulated over 4 length-sorted microbatches, each token_mean / 4",
    "sampler_temp": "sampler at SAMPLER_TEMP and its log-probs used as old_logp; trainer at the configured temperature",
    "ref_is_policy": "the KL reference is the live policy object",
}

# name: what it does -> the layer expected to see it (check N = the chapter's invariant N).
CATALOGUE = {
    # sampling (sampler.py, batch.py)
    "sampler_top_k": "sampler draws from the top-SAMPLER_TOP_K tokens and records the truncated log-probs; "
                     "the trainer scores the full softmax -> check 2/3, logp_gap",
    "stop_token_unowned": "the <end> that closes a call is recorded as environment-owned (a stripped stop "
                          "string): it is never trained on -> nothing at step 0; an 'every sampled token is trained' invariant",
    "logp_no_temp": "trainer log-probs (old and new) ignore the temperature; the sampler applies it "
                    "(needs temperature != 1) -> logp_gap; check 2 at that temperature",
    # masking / padding (batch.py)
    "env_in_mask": "tool-output (environment) tokens trained on beside the policy's -> check 1",
    "pad_in_mask": "loss mask = 'not prompt, not env': right padding is trained on -> checks 1, 5",
    "last_token_unmasked": "off-by-one: the last token of each episode (the final <end>) left out of the mask -> check 1",
    # advantages (losses.compute_advantages)
    "adv_batch_std": "group mean, but std over the whole batch -> nothing at step 0; "
                     "'advantages = (r - group mean) / group std' invariant",
    "adv_no_eps": "no epsilon under the group std: a flat group gives 0/0 = NaN (needs a flat group) -> NaN detector",
    "adv_wrong_axis": "group mean/std taken over the wrong axis (across tasks, per sample slot) -> check 4",
    "adv_renorm_in_update": "the update whitens the advantages again over each minibatch (a learner-side "
                            "second normalization) -> nothing that reads prepare(); 'the update consumes "
                            "prepare()'s tensors' invariant",
    # loss and clipping (losses.policy_loss / aggregate)
    "ratio_inverted": "ratio = exp(old_logp - logp): the gradient points the other way -> check 8",
    "clip_low_eps": "ratio clipped to [eps, 1 + eps] instead of [1 - eps, 1 + eps]: the lower clip is gone "
                    "(needs ratio < 1 - eps) -> a clipped-surrogate-gradient invariant",
    "clip_max": "the surrogate takes max instead of min (optimistic bound) (needs ratio outside the clip range) "
                "-> a clipped-surrogate-gradient invariant",
    "seq_mean_padded": "seq_mean_token_mean divides each episode by the padded width, not its own length "
                       "(needs loss_mode seq_mean_token_mean) -> check 6 at that loss mode",
    # KL / reference (update.py, train.py)
    "kl_detached": "KL term computed on detached log-probs: logged, but no gradient (needs kl_coef > 0) "
                   "-> a 'KL gradient = kl_coef x dKL' invariant",
    "kl_sign": "KL subtracted from the loss: a bonus for drifting from the reference (needs kl_coef > 0) -> kl_ref rising",
    "ref_synced": "the reference reloaded from the policy after every step (needs kl_coef > 0) -> kl_ref near 0",
    # optimizer and accumulation (update.py, train.py)
    "no_zero_grad": "optimizer.zero_grad() dropped: gradients accumulate across minibatches and steps "
                    "-> grad_norm climbing; a 'gradients are zero before backward' invariant",
    "zero_grad_per_micro": "zero_grad inside the microbatch loop: only the last microbatch's gradient is kept "
                           "(needs microbatches > 1) -> check 6 at that setting",
    "optimizer_per_step": "Adam rebuilt every step: its moments and step count reset -> 'optimizer state persists' invariant",
    # evaluation / RNG (train.py)
    "eval_train_rng": "held-out evaluation samples from the training generator: the eval schedule changes "
                      "training -> 'same seed, same rows whatever the eval schedule'",
    "log_sample_rng": "logging a sample episode draws its index from the training generator -> "
                      "'same seed, same rows whatever the logging schedule'",
    # reward / config (sampler.py)
    "env_cfg_ignored": "the sampler builds a default EnvConfig: configured reward / max_turns silently ignored "
                       "(needs --reward public or --max-turns != 6) -> 'rewards = the configured reward rule'",
    "unsubmitted_rewarded": "episodes that run out of turns are scored on the public tests of their last code "
                            "-> 'rewards = the configured reward rule' (stalling pays)",
    # the loop between steps (train.py): what the sampler runs, which tasks it is given
    "sampler_stale": "the trainer's weights are never pushed to the sampler's copy: every step samples the "
                     "starting policy -> 'sampler = trainer log-prob, every step'",
    "tasks_reseeded": "the task draw re-seeded each step: every step trains on the same tasks -> the task stream check",
    "tasks_with_replacement": "a step's tasks drawn with replacement: repeated tasks -> the task stream check",
    "group_tiled": "the task list tiled G times instead of each task repeated G times: a group mixes tasks "
                   "-> 'each group holds one task'",
    "heldout_in_train": "the tasks an evaluation used join the training pool: later steps train on held-out "
                        "tasks -> the task stream check",
    # the optimizer the loop steps (update.py)
    "optimizer_lr_ignored": "the optimizer built without the configured learning rate (torch's default 1e-3) "
                            "-> 'learning rate = the schedule'",
    "weight_decay_ignored": "the configured weight decay never reaches the optimizer (needs weight_decay > 0) "
                            "-> 'optimizer = the configured one'",
    "clip_grad_after_step": "the gradient clipped after the optimizer step, so the step applies it unclipped "
                            "-> 'gradients clipped to max_grad_norm before each step'",
    "grad_clip_hardcoded": "gradients clipped at 1.0 whatever max_grad_norm says (needs max_grad_norm != 1) "
                           "-> 'gradients clipped to max_grad_norm before each step'",
    "scheduler_per_microbatch": "the schedule stepped once per microbatch, not per optimizer step (needs a "
                                "schedule and microbatches > 1) -> 'learning rate = the schedule'",
    "warmup_zero_first": "warmup factor n / warmup: the first step trains at lr 0 (needs warmup_steps > 0) "
                         "-> 'learning rate = the schedule'",
    # objective terms at their exact values, paths off the default (losses.py, update.py)
    "kl_k3_reversed": "k3 with x = logp - ref_logp: not an estimate of KL(policy || ref) (needs kl_coef > 0) "
                      "-> 'loss = the declared objective'",
    "kl_unmasked": "the KL term averaged over every position, prompt and padding included (needs kl_coef > 0) "
                   "-> 'loss = the declared objective'",
    "ref_untempered": "reference log-probs from untempered logits (needs temperature != 1 and kl_coef > 0) "
                      "-> 'reference log-probs = the starting policy's'",
    "entropy_untempered": "the entropy bonus taken on untempered logits (needs entropy_coef > 0 and temperature "
                          "!= 1) -> 'loss = the declared objective'",
    "entropy_unmasked": "the entropy bonus averaged over every position (needs entropy_coef > 0) "
                        "-> 'loss = the declared objective'",
    "clip_min_before_advantage": "min(ratio, clip(ratio)) * A: the clip ignores A's sign (needs ratio outside "
                                 "the clip range) -> 'loss = the declared objective', check 10",
    "token_norm_over_batch": "each minibatch's token mean divided by the whole batch's tokens: the gradient "
                             "shrinks by the number of minibatches -> check 6",
    # values stored for the loss, the environment's contract
    "rewards_misaligned": "rewards collected in the order episodes finished, not row order -> 'advantages = "
                          "the declared estimator of each episode's reward'",
    "malformed_executed": "an edit call with a missing or bad argument is run as edit 0 instead of rejected "
                          "-> 'malformed calls are rejected'",
}

# The setting a fault needs to bite (beyond the defaults); the rest bite at the defaults.
NEEDS = {
    "logp_no_temp": {"temperature": 0.7},
    "adv_no_eps": {"flat_group": True},
    "clip_low_eps": {"ratio_outside_clip": True},
    "clip_max": {"ratio_outside_clip": True},
    "seq_mean_padded": {"loss_mode": "seq_mean_token_mean"},
    "kl_detached": {"kl_coef": 0.1},
    "kl_sign": {"kl_coef": 0.1},
    "ref_synced": {"kl_coef": 0.1},
    "zero_grad_per_micro": {"microbatches": 2},
    "env_cfg_ignored": {"reward": "public"},
    "weight_decay_ignored": {"weight_decay": 0.01},
    "grad_clip_hardcoded": {"max_grad_norm": 0.001},
    "scheduler_per_microbatch": {"lr_schedule": "linear", "microbatches": 2},
    "warmup_zero_first": {"warmup_steps": 2},
    "kl_k3_reversed": {"kl_coef": 0.1},
    "kl_unmasked": {"kl_coef": 0.1},
    "ref_untempered": {"kl_coef": 0.1, "temperature": 0.7},
    "entropy_untempered": {"entropy_coef": 0.01, "temperature": 0.7},
    "entropy_unmasked": {"entropy_coef": 0.01},
    "clip_min_before_advantage": {"ratio_outside_clip": True},
    "clip_grad_after_step": {"max_grad_norm": 0.001},
}

BUGS = {**CHAPTER, **CATALOGUE}
# ENTROPY_COEF: at 128 episodes per step a 0.3 penalty lost to the policy learning to read (docs/tinyagent.md, Length bias)
SAMPLER_TEMP, ENTROPY_COEF = 0.7, 0.5
SAMPLER_TOP_K = 3


def check_bug(bug: str | None) -> str | None:
    """Validate a fault name (None = no fault)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    return bug
