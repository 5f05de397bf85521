"""The replayer of TinyAgent snapshots: the saved update re-run with the importable trainer."""

from __future__ import annotations

import os
from pathlib import Path


def replay_reference(snap, bug: str | None = None):
    """Re-run a TinyAgent snapshot's update with the importable ``reference_trainer``.

    Mirrors ``reference_trainer.train.train`` around ``rl_update``: the policy in eval mode, the
    configured optimizer and its learning-rate schedule (stepped inside the update: the recorded
    position, the run's length from the config), the "train" generator, the recorded thread count. The KL reference is the one the snapshot
    carries (the base policy the run started from); a snapshot without it falls back to the cached
    base policy, and says so. ``bug``: None replays with the recorded fault switch, "none" with no
    fault, a name with that fault.
    """
    import torch

    from rlbisect.errors import describe
    from rlbisect.steps.capture import copy_tensors, diff_norm, optimizer_digest, state_digest
    from rlbisect.steps.replay import (Replayed, ReplayError, UpdateRaised, restore_model,
                                       restore_optimizer, restore_rng, restore_scheduler)
    try:
        import reference_trainer
        from reference_trainer.config import RLConfig
        from reference_trainer.faults import check_bug
        from reference_trainer.policy import Policy
        from reference_trainer.tasks import make_tasks
        from reference_trainer.tokenizer import build_tokenizer
        from reference_trainer.update import make_optimizer, make_ref, make_scheduler, rl_update
    except Exception as e:  # noqa: BLE001 - code at another commit may not import at all
        raise ReplayError(f"cannot import the reference trainer: {type(e).__name__}: {e}") from None
    notes = [f"trainer code: {Path(reference_trainer.__file__).parent}"]
    try:
        cfg = RLConfig.model_validate(snap.config.get("rl", {}))
        bug = snap.config.get("bug") if bug is None else None if bug == "none" else bug
        check_bug(bug)
        # a file's word is not enough to start 100,000 threads: at most this machine's cores
        threads = max(1, min(cfg.threads, os.cpu_count() or 1))
        torch.set_num_threads(threads)
        tok = build_tokenizer(make_tasks("all"))
        model = Policy(len(tok)).eval()
        optimizer = make_optimizer(model, cfg.update)
        scheduler = None   # built before the optimizer's state goes back: building one sets the rates
        if snap.scheduler is not None and isinstance(total := snap.config.get("optimizer_steps"), int):
            scheduler = make_scheduler(optimizer, cfg.update, total, bug)
        restore_model(snap, model)
        restore_optimizer(snap, optimizer)
        if scheduler is not None:
            restore_scheduler(snap, scheduler)
        elif cfg.update.lr_schedule != "constant" or cfg.update.warmup_steps:
            missing = "no learning-rate schedule" if snap.scheduler is None else \
                "no run length (config 'optimizer_steps', which make_hook(..., steps=) records)"
            notes.append(f"the snapshot holds {missing}: replayed at the recorded rate throughout the update "
                         "(its minibatches after the first may not match)")
        ref = make_ref(model, cfg, bug)
        if ref is not None and ref is not model:
            if "ref" in snap.frozen:
                ref.load_state_dict(snap.frozen["ref"])
            else:
                from reference_trainer.base import make_base
                ref.load_state_dict(make_base(tok).state_dict())
                notes.append("KL reference rebuilt from the cached base policy: the snapshot "
                             "carries none")
        gen = torch.Generator()
        restore_rng(snap, {"train": gen})   # last: nothing above may draw from the recorded streams
    except Exception as e:  # noqa: BLE001 - a config or state the code cannot take: cannot replay
        raise ReplayError(f"cannot rebuild the trainer state: {describe(e)}") from None
    if bug != snap.config.get("bug"):
        notes.append(f"replayed with fault {bug or 'none'} (recorded with "
                     f"{snap.config.get('bug') or 'none'})")
    try:
        stats = rl_update(model, optimizer, copy_tensors(snap.batch), cfg, bug, ref, gen, scheduler=scheduler)
    except Exception as e:  # noqa: BLE001 - the trainer's own update failing is a finding
        raise UpdateRaised(f"{type(e).__name__}: {e}".splitlines()[0]) from None
    after = model.state_dict()
    return Replayed(stats=stats, post_update_sha256=state_digest(after),
                    update_norm=diff_norm(after, snap.model),
                    update_diff_norm=None if snap.post_update is None else diff_norm(after, snap.post_update),
                    notes=notes, post_optimizer_sha256=optimizer_digest(optimizer))
