"""Replayable steps from a verl run: the detectors on every actor update, a file when one fires.

    from rlbisect.frameworks.verl.snapshot import watch
    hook = watch(worker, "snapshots")        # worker: verl's TrainingWorker (ActorRolloutRefWorker.actor)
    ...                                      # the run goes on; step-NNNNNN.pt written on a detector hit

    rlbisect replay snapshots/step-000003.pt

`watch` wraps the worker's `train_mini_batch`, the call `RayPPOTrainer._update_actor` reaches with
the whole update's batch (input ids, response mask, old and reference log-probs, advantages and the
mini-batch, epoch and seed keys). Before it: the batch (a no-padding TensorDict, its jagged tensors
stored as values and offsets, its other keys as JSON), the module's weights and the optimizer's state
(`SnapshotHook`, one safetensors file: nothing is pickled). After it: verl's metrics, under rlbisect's
names where the quantity is the same (`worker.stats`), to the detectors.

`replay` (registered as the replayer of trainer "verl") rebuilds the module from the Hugging Face
config the file records (a class transformers ships, chosen by its `model_type`; never remote code),
the optimizer from a fixed table, `ppo_loss` bound to the recorded actor settings, and re-runs
`worker.train_mini_batch`: the same verl functions in the same order, on this process's CPU. A
step recorded on one CPU process replays bit for bit; one recorded on GPUs under FSDP runs the same
update, so its numbers agree to the precision the devices share, not to the bit.
"""

from __future__ import annotations

import itertools
import json
from functools import partial
from typing import Any, Optional

import torch

from rlbisect.frameworks.verl import worker as w
from rlbisect.steps.hook import SnapshotHook
from rlbisect.steps.replay import Replayed, ReplayError, UpdateRaised, restore
from rlbisect.steps.spikes import SpikeConfig, default_detectors

TRAINER_NAME = "verl"
#: the ActorConfig fields `ppo_loss` and the update read, recorded and set again at replay
ACTOR_FIELDS = ("ppo_micro_batch_size_per_gpu", "use_dynamic_bsz", "clip_ratio", "clip_ratio_low", "clip_ratio_high",
                "clip_ratio_c", "loss_agg_mode", "loss_scale_factor", "entropy_coeff", "use_kl_loss", "kl_loss_type",
                "kl_loss_coef", "ppo_epochs", "shuffle")
#: the optimizers a file may name: a name only selects one of these
OPTIMIZERS = {"AdamW": torch.optim.AdamW, "Adam": torch.optim.Adam, "SGD": torch.optim.SGD}
JAGGED, HELD = "jagged/", "held/"


def pack(data) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A no-padding TensorDict as tensors safetensors can hold and JSON for the rest: a jagged
    tensor as its values and offsets; the non-tensor keys (temperature, mini_batch_size, ...) as
    JSON. A key that is neither (the rollout's per-row objects: uids, raw prompts, reward-model
    dicts as numpy object arrays, which the update does not read) is left out and named in
    ``dropped``: a debugging aid must not stop the run it watches."""
    import tensordict
    tensors: dict[str, torch.Tensor] = {}
    plain: dict[str, Any] = {}
    dropped: list[str] = []
    for key in data.keys():
        value = data[key]
        if isinstance(value, torch.Tensor) and tensordict.is_non_tensor(data.get(key)):
            tensors[f"{HELD}{key}"] = value     # a tensor kept outside the batch dimension (verl's indices)
            continue
        if isinstance(value, torch.Tensor):
            if value.is_nested:
                offsets = value.offsets()  # type: ignore[attr-defined]
                tensors[f"{JAGGED}{key}/values"], tensors[f"{JAGGED}{key}/offsets"] = value.values(), offsets
            else:
                tensors[key] = value
            continue
        try:
            json.dumps(value)
            plain[key] = value
        except (TypeError, ValueError):
            dropped.append(str(key))
    return tensors, {"rows": int(data.shape[0]), "non_tensor": plain, "dropped": dropped}


def unpack(tensors: dict[str, torch.Tensor], layout: dict[str, Any]):
    """The TensorDict :func:`pack` stored, its jagged tensors and non-tensor keys restored."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.tensordict_utils import TensorDict
    from tensordict import NonTensorData
    dense: dict[str, Any] = {}
    jagged: dict[str, dict[str, torch.Tensor]] = {}
    held: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        if key.startswith(HELD):
            held[key[len(HELD):]] = value.clone()
        elif key.startswith(JAGGED):
            name, _, part = key[len(JAGGED):].rpartition("/")
            jagged.setdefault(name, {})[part] = value.clone()
        else:
            dense[key] = value.clone()
    for name, parts in jagged.items():
        if set(parts) != {"values", "offsets"}:
            raise ReplayError(f"the snapshot's jagged tensor {name!r} lacks its values or offsets")
        dense[name] = torch.nested.nested_tensor_from_jagged(parts["values"], parts["offsets"])
    td = TensorDict(dense, batch_size=[int(layout["rows"])])
    tu.assign_non_tensor(td, **layout.get("non_tensor", {}))
    for key, value in held.items():
        td[key] = NonTensorData(value)
    return td


def _defaults(worker) -> dict[str, Any]:
    """What verl's `TrainingWorker.train_batch` adds to a batch that lacks it (from its engine and
    model config), so a replay, which has no worker, splits the micro-batches the same way."""
    engine_config, model_config = getattr(worker, "engine_config", None), getattr(worker, "model_config", None)
    if engine_config is None:
        return {}
    return {"use_remove_padding": bool(model_config.get("use_remove_padding", False)) if model_config else False,
            "use_dynamic_bsz": engine_config.use_dynamic_bsz, "max_token_len_per_gpu": engine_config.max_token_len_per_gpu,
            "micro_batch_size_per_gpu": engine_config.micro_batch_size_per_gpu,
            "use_fused_kernels": engine_config.use_fused_kernels}


def recorded_config(worker, bug: Optional[str] = None) -> dict[str, Any]:
    """What a replay needs besides the tensors, as JSON: verl's version, the actor's loss settings,
    the clip norm, the optimizer's class name, the module's Hugging Face config."""
    import verl
    engine, loss_fn = worker.engine, worker.loss_fn
    config = getattr(loss_fn, "keywords", {}).get("config")
    if config is None or getattr(getattr(loss_fn, "func", None), "__name__", "") != "ppo_loss":
        raise ValueError("the worker's loss_fn is not verl's ppo_loss bound to an ActorConfig (set_loss_fn): "
                         "a replay runs ppo_loss, so other losses (distillation, SFT) are not replayable")
    module = engine.module
    import torch.distributed as dist
    if any(type(p).__name__ == "DTensor" for p in module.parameters()) or \
            (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        raise ValueError("the actor's module is sharded or the run has several processes: rlbisect's verl "
                         "snapshots need the whole module in one process (not supported yet)")
    name = type(engine.optimizer).__name__
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer {name} is not one a snapshot can rebuild ({', '.join(OPTIMIZERS)})")
    hf = module.config.to_dict()
    hf.pop("auto_map", None)      # remote code is never a replay's to load
    return {"trainer": TRAINER_NAME, "verl": str(getattr(verl, "__version__", "unknown")),
            "actor": {f: getattr(config, f) for f in ACTOR_FIELDS},
            "policy_loss": getattr(getattr(config, "policy_loss", None), "loss_mode", "vanilla"),
            "clip_grad": float(engine.optimizer_config.clip_grad), "optimizer": name, "model": hf,
            "attn_implementation": getattr(module.config, "_attn_implementation", None), "bug": bug,
            "ignores_autocast": bool(getattr(module, "ignores_autocast", False))}


def watch(worker, directory, *, every: Optional[int] = None, detectors: Optional[SpikeConfig] = None,
          bug: Optional[str] = None, **hook_options) -> SnapshotHook:
    """Detectors on every `worker.train_mini_batch` call; a replayable file when one fires (or every
    ``every`` steps). Returns the `SnapshotHook` (its `hits`, `saved`, `errors`). ``hook_options``
    as for `SnapshotHook` (keep_last, max_snapshots, meta, keep_post_update, code_dir)."""
    engine = worker.engine
    config = recorded_config(worker, bug)
    hook = SnapshotHook(directory, every=every, detectors=detectors, config=config, **hook_options)
    base_meta, defaults = dict(hook.meta), _defaults(worker)
    inner, steps = worker.train_mini_batch, itertools.count()

    def watched(data):
        step = next(steps)
        tensors, layout = pack(data)
        layout["non_tensor"] = {**defaults, **layout["non_tensor"]}
        if step == 0 and detectors is None and _updates(layout) == 1:
            hook.detectors = default_detectors(SpikeConfig.for_trainer(1))   # ratio 1 by design
        hook.meta = {**base_meta, "verl_batch": layout}
        hook.before_update(step, engine.module, engine.optimizer, tensors)
        try:
            out = inner(data=data)
        except BaseException as e:
            hook.step_failed(e)
            raise
        hook.after_update(step, w.stats(_metrics(out)))
        return out
    worker.train_mini_batch = watched
    return hook


def _updates(layout: dict) -> int:
    plain = layout["non_tensor"]
    size = plain.get("mini_batch_size") or layout["rows"] // max(1, plain.get("num_mini_batch") or 1)
    return max(1, layout["rows"] // max(1, size)) * int(plain.get("epochs", 1))


def _metrics(out) -> dict:
    if isinstance(out, dict):
        return out
    from verl.utils import tensordict_utils as tu
    return dict(tu.get(out, "metrics") or {})


def _module(snap) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM
    hf = dict(snap.config.get("model") or {})
    kind = hf.pop("model_type", None)
    try:
        cfg = AutoConfig.for_model(kind, **hf)
        attn = snap.config.get("attn_implementation")
        model = AutoModelForCausalLM.from_config(cfg, trust_remote_code=False, **({"attn_implementation": attn}
                                                                                  if attn else {}))
    except (ValueError, KeyError, TypeError) as e:
        raise ReplayError(f"cannot build the recorded model ({kind!r}): {e}".splitlines()[0]) from None
    if snap.config.get("ignores_autocast"):
        from rlbisect.frameworks.verl.tiny import own_dtype
        model.__class__ = own_dtype(model.__class__)
    return model.to(dtype=next(iter(snap.model.values())).dtype) if snap.model else model


def _actor_config(snap):
    from verl.workers.config import ActorConfig
    fields = dict(snap.config.get("actor") or {})
    unknown = set(fields) - set(ACTOR_FIELDS)
    if unknown:
        raise ReplayError(f"unknown actor setting {sorted(unknown)[0]!r} in the snapshot")
    rows = int(snap.meta.get("verl_batch", {}).get("rows", 1))
    config = ActorConfig(strategy="fsdp", ppo_mini_batch_size=rows, rollout_n=1, **fields)
    mode = snap.config.get("policy_loss", "vanilla")
    if mode != "vanilla":
        config.policy_loss.loss_mode = mode
    return config


def replay(snap, bug: Optional[str] = None) -> Replayed:
    """Re-run a verl snapshot's update with the verl importable here (see the module docstring).
    ``bug``: None keeps the recorded fault switch (the demo's), "none" replays without one."""
    from rlbisect.frameworks.verl import tiny
    from rlbisect.frameworks.verl._internals import require_verl
    from rlbisect.check.loading import AdapterNotFound, AdapterUnfit
    from rlbisect.steps.capture import diff_norm, optimizer_digest, state_digest
    try:
        version = require_verl()
    except (AdapterNotFound, AdapterUnfit) as e:
        raise ReplayError(f"a verl snapshot replays with verl: {e}") from None
    from verl.workers.utils.losses import ppo_loss
    notes = [f"verl {version} (recorded with {snap.config.get('verl')})"]
    dropped = snap.meta.get("verl_batch", {}).get("dropped") or []
    if dropped:
        notes.append(f"batch keys not stored (not read by the update): {', '.join(map(str, dropped))}")
    chosen = snap.config.get("bug") if bug is None else None if bug == "none" else bug
    try:
        fault = tiny.inject(chosen)
        module = _module(snap)
        optimizer = OPTIMIZERS[str(snap.config.get("optimizer"))](module.parameters(), lr=0.0)
        restore(snap, module, optimizer, {})
        data = unpack(snap.batch, snap.meta.get("verl_batch", {}))
        loss_fn = partial(ppo_loss, config=_actor_config(snap))
    except ReplayError:
        raise
    except (KeyError, ValueError, RuntimeError, TypeError) as e:
        raise ReplayError(f"the snapshot does not fit this verl: {e}".splitlines()[0]) from None
    try:
        with fault:
            metrics = w.train_mini_batch(module, optimizer, float(snap.config["clip_grad"]), data, loss_fn)
    except Exception as e:
        raise UpdateRaised(f"{type(e).__name__}: {e}".splitlines()[0]) from e
    after = module.state_dict()
    return Replayed(w.stats(metrics), state_digest(after), diff_norm(after, snap.model),
                    diff_norm(after, snap.post_update) if snap.post_update is not None else None, notes,
                    optimizer_digest(optimizer))


def demo_run(directory, steps: int = 3, seed: int = 0, every: Optional[int] = None, bug: Optional[str] = None,
             **settings: Any) -> SnapshotHook:
    """A short run of the demo (`run.py`'s loop over verl's actor code) with its worker watched."""
    from rlbisect.frameworks.verl.adapter import demo
    adapter = demo(bug=bug, **settings)
    hooks: list[SnapshotHook] = []
    adapter.train_run(steps, seed, 0, on_worker=lambda worker: hooks.append(watch(worker, directory, every=every,
                                                                                   bug=bug)))
    return hooks[0]
