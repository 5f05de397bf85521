"""The chapter's seven code faults, each one switch (`bug=`) at the place that bug lives.

    mask_shift      batch.prepare_batch     action mask aligned to ids instead of ids[1:]
    stale_old_logp  update.rl_update        old_logp recomputed from the current weights per minibatch
    entropy_sign    update.minibatch_backward  entropy bonus added with the wrong sign (a penalty)
    sign_flip       batch.prepare_batch     advantages negated
    accum_local     update.minibatch_backward  4 length-sorted microbatches, each token_mean / 4
    sampler_temp    train.train + batch.prepare_batch  sampler at 0.7, its log-probs used as old_logp
    ref_is_policy   update.make_ref         the KL reference is the live policy object

The configuration failures (lr 1e-2, the public reward, seq_mean_token_mean with 12 turns) run
correct code and need no switch.
"""

BUGS = {
    "mask_shift": "action mask aligned to ids instead of ids[1:]: each policy span moves one token right",
    "stale_old_logp": "old_logp recomputed from the current weights before every minibatch",
    "entropy_sign": "entropy bonus added with the wrong sign: an entropy penalty of ENTROPY_COEF",
    "sign_flip": "advantages negated",
    "accum_local": "minibatch accumulated over 4 length-sorted microbatches, each token_mean / 4",
    "sampler_temp": "sampler at SAMPLER_TEMP and its log-probs used as old_logp; trainer at the configured temperature",
    "ref_is_policy": "the KL reference is the live policy object",
}
SAMPLER_TEMP, ENTROPY_COEF = 0.7, 0.3


def check_bug(bug: str | None) -> str | None:
    """Validate a fault name (None = no fault)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    return bug
