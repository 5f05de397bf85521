"""rlbisect's adapter for TRL's GRPOTrainer: wrap a trainer you built, check it with TRL's own code.

    # my_adapter.py
    from rlbisect.frameworks.trl.adapter import GRPOAdapter
    def make_adapter(episodes=32, seed=1, kl_coef=0.1):
        trainer = GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(..., beta=kl_coef), ...)
        return GRPOAdapter(trainer, episodes=episodes, seed=seed)

    rlbisect check --adapter my_adapter.py:make_adapter

Every probe point runs TRL's code (`_generate_and_score_completions`, `compute_loss`, `training_step`,
`_get_per_token_logps_and_entropies`, its reference model); the reaches into its private API live in
`_internals.py` (feature-detected, no version pin), the sampler's record in `_sampling.py` (HF
`generate`'s processed scores, the tokens drawn per row: checks 2, 13; the reward functions applied
again: 16), what TRL declares in `declared.py` (the objective per loss type, by-design gaps, variants).
`loss(..., tap)` and `update(..., tap)` show rlbisect what each `_compute_loss` call is handed, TRL's
stored reference log-probs included (checks 15, 19, 20). Layout: P = the completion's positions,
rows group by group as TRL lays them out. `rlbisect check --adapter rlbisect.frameworks.trl:demo`
checks a tiny GRPOTrainer built in code (`tiny.py`); `--adapter-opt loss_type=dapo`, ...
"""

from __future__ import annotations

import types
import weakref
from typing import Any, Callable, Hashable, Optional

import torch

from rlbisect.frameworks.trl import _internals as trl_, _sampling, declared, run
from rlbisect.check.adapter import Prepared
from rlbisect.check.capabilities import Capabilities
from rlbisect.check.copies import clone

PPO_CLIP, OTHER_OBJECTIVES = declared.PPO_CLIP, declared.OTHER_OBJECTIVES


require_trl = trl_.require_trl
require_tested_trl = require_trl     # the name earlier releases exported


class GRPOAdapter:
    """rlbisect's TrainerAdapter for a constructed `trl.GRPOTrainer`. With ``factory`` (a callable
    building the same trainer at other settings, ``factory(**settings) -> GRPOAdapter``) it offers
    ``with_settings`` and the ``variants`` the checks exercise by default. ``fresh``: ``trainer`` is
    what ``factory()`` builds and nothing has run it yet, so the first short run may train it
    instead of building another (any use of ``adapter.trainer`` before that spends it)."""

    faults: list[str]   # set by demo(): the faults its tiny trainer can inject

    def __init__(self, trainer, episodes: Optional[int] = None, seed: int = 1,
                 factory: Optional[Callable[..., "GRPOAdapter"]] = None, variants: Optional[dict] = None,
                 key: Optional[Hashable] = None, fresh: bool = False):
        self.trl_version = require_trl(trainer)
        self._trainer, self.seed, self._fresh = trainer, seed, fresh and factory is not None
        self.G = trainer.num_generations
        self.episodes = episodes or trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
        if self.episodes % self.G:
            raise ValueError(f"episodes ({self.episodes}) must be a multiple of num_generations ({self.G})")
        # vLLM's log-probs are only kept for its correction
        sampler_logp = not getattr(trainer, "use_vllm", False) or getattr(trainer, "vllm_importance_sampling_correction", False)
        self.loss_type = trainer.loss_type
        if self.loss_type not in PPO_CLIP | OTHER_OBJECTIVES:
            raise ValueError(f"loss_type {self.loss_type!r} is not one this adapter was read against "
                             f"({', '.join(sorted(PPO_CLIP | OTHER_OBJECTIVES))})")
        # the objective TRL means to compute, or its kind and why it cannot be stated (declared.py)
        self.objective, self.objective_why = declared.objective(trainer)
        self.capabilities = Capabilities(sampler_logp=sampler_logp,
                                         one_step_per_batch=trl_.one_step_per_batch(trainer),
                                         by_design=declared.by_design(trainer))
        self._factory, self._key = factory, key if key is not None else id(trainer)   # key: the settings
        self.with_settings = self._with_settings if factory is not None else None
        self.variants = dict(variants if variants is not None else declared.variants(trainer)) if factory else {}
        self.run_variant = declared.RUN_VARIANT if self.variants else None
        if factory is not None:      # short runs of GRPOTrainer.train() on fresh trainers (run.py)
            self.train_run = types.MethodType(run.train_run, self)
            self.run_spec = types.MethodType(run.run_spec, self)
        self._initial = clone(trl_.unwrapped(trainer))      # step 0, before anything trains it

    @property
    def trainer(self):
        self._fresh = False
        return self._trainer

    def spare(self) -> Optional["GRPOAdapter"]:
        """This adapter, once, while its trainer is as ``factory()`` built it (``fresh``); else None."""
        if not self._fresh:
            return None
        self._fresh = False
        return self

    def _with_settings(self, **settings) -> "GRPOAdapter":
        """The same trainer (its faults included) at other settings, built by the factory."""
        return self._factory(**settings)  # type: ignore[misc]   # offered only with a factory

    # -- the Protocol ---------------------------------------------------------------------------

    def policy(self):
        return clone(self._initial)

    def probe_batch(self):
        """A generation batch of `episodes` completions (episodes / G prompts drawn by the seed from
        the trainer's dataset, each G times, as its RepeatSampler lays them out), sampled and
        scored by TRL; the truth from what the sampler recorded."""
        data = self.trainer.train_dataset
        pick = torch.randperm(len(data), generator=torch.Generator().manual_seed(self.seed))
        chosen = [int(i) for i in pick[: self.episodes // self.G] for _ in range(self.G)]
        inputs = [dict(data[i]) for i in chosen]
        record: dict = {}
        torch.manual_seed(self.seed)          # HF sampling draws from the global generator
        with _sampling.recording_generation(self.trainer, record):
            out = trl_.score(self.trainer, inputs)
        return _sampling.scored_batch(self.trainer, self.G, inputs, out, record, torch.tensor(chosen), self._key)

    def _own(self, batch: dict) -> dict:
        """`batch` as this trainer scores it: a batch another trainer (another setting, see
        ``with_settings``) sampled is scored again by this one's `_generate_and_score_completions` on
        the same completions and rewards, so what TRL stores with it (old and reference log-probs,
        masks, advantages) is this trainer's own; kept with the batch."""
        if batch.get("key", self._key) == self._key:    # scored by this trainer, or one at its settings
            return batch
        mine = batch.setdefault("_scored_by", {})
        if self._key not in mine:
            out = trl_.scored_again(self.trainer, batch["raw"], batch["generated"], batch["per_func"])
            mine[self._key] = {**{k: v for k, v in batch.items() if not k.startswith("_")},
                               "inputs": out, "trainer": self.trainer, "key": self._key}
        return mine[self._key]

    def prepare(self, model, batch):
        batch = self._own(batch)
        inp = batch["inputs"]
        old = inp.get("old_per_token_logps")
        if old is None:       # one step per batch: _compute_loss uses the current log-probs, detached
            old = self.log_probs(model, batch)
        return Prepared(trl_.loss_mask(inp), old, inp["advantages"].float())

    def log_probs(self, model, batch, rows=None):
        """Remembered per batch and weights: the key holds each parameter's in-place version
        counter, so weights changed in place (an optimizer step) are never served stale. With
        ``rows``, those rows alone (not remembered: check 11 asks for a few of a moved model). Any
        model is scored as the trainer scores its policy (its temperature: `_internals.as_policy`)."""
        batch = self._own(batch)
        if rows is not None:
            inp = batch["inputs"]
            return trl_.per_token_logps(self.trainer, model, {
                k: v[rows] if isinstance(v, torch.Tensor) and v.ndim > 0 else v for k, v in inp.items()})
        key = (id(model), tuple(p._version for p in model.parameters()))
        cache, owners = batch.setdefault("_current_logp", {}), batch.setdefault("_owners", {})
        if key not in cache or owners.get(key, lambda: None)() is not model:   # an id reused after gc
            cache[key] = trl_.per_token_logps(self.trainer, model, batch["inputs"])
            owners[key] = weakref.ref(model)
        return cache[key]

    def _rows(self, batch, rows, prep: Prepared, kl: bool = False) -> dict:
        """The TRL micro-batch of `rows`, with `prep`'s mask, old log-probs and advantages; with
        `kl`, the reference log-probs TRL stored when it scored the batch (never recomputed here)."""
        inp = batch["inputs"]
        out = {k: v[rows] for k, v in inp.items() if isinstance(v, torch.Tensor) and v.ndim > 0}
        if not torch.equal(prep.mask, trl_.loss_mask(inp)):
            out["completion_mask"] = prep.mask[rows].long()
            out.pop("tool_mask", None)
        out["advantages"] = prep.advantages[rows]
        own_fallback = "old_per_token_logps" not in inp and \
            any(prep.old_logp is t for t in batch.get("_current_logp", {}).values())
        if not own_fallback:                  # else leave TRL's own path: per_token_logps.detach()
            out["old_per_token_logps"] = prep.old_logp[rows]
        if kl and "ref_per_token_logps" not in inp:
            raise ValueError("TRL stored no reference log-probs with this batch (beta was 0 when it scored it)")
        out["num_items_in_batch"] = trl_.loss_mask(out).sum()
        out[trl_.ROW] = rows
        return out

    def loss(self, model, batch, rows, prep, ref=None, tap=None):
        """TRL's `compute_loss` of `rows` in one pass. ``ref`` switches its KL term on (beta); the
        reference log-probs it then consumes are the ones TRL stored with the batch from its own
        ref_model (check 20 compares them with ``ref``'s). ``tap`` is shown what `_compute_loss` is
        handed and returns (`_internals.one_window`)."""
        batch = self._own(batch)
        beta = self.trainer.beta if ref is not None else 0.0
        inputs = self._rows(batch, rows, prep, kl=ref is not None)
        with trl_.one_window(self.trainer, 1, beta, [], tap):
            loss = trl_.one_pass_loss(self.trainer, model, inputs)
        return loss, {"loss": float(loss.detach())}

    def backward(self, model, batch, rows, prep):
        """TRL's training_step over `rows` as one accumulation window of
        `gradient_accumulation_steps` micro-batches (without the KL term, like `loss`). TRL's
        micro-batches are equal, so where `rows` do not split into that many equal ones, the window
        is the most micro-batches, fewer, that they do split into (unequal ones, or empty ones,
        were no window TRL ever runs: a false failure, or a raise in TRL's log-prob pass)."""
        batch = self._own(batch)
        ga = self.trainer.args.gradient_accumulation_steps
        ga = max(k for k in range(1, ga + 1) if len(rows) % k == 0)
        inputs = self._rows(batch, rows, prep)
        seen: list = []
        total = 0.0
        with trl_.one_window(self.trainer, ga, 0.0, seen):
            for part in torch.tensor_split(torch.arange(len(rows)), ga):
                micro = {k: (v[part] if v.ndim > 0 else v) for k, v in inputs.items()}
                total += float(trl_.training_step(self.trainer, model, micro))
        return {"loss": total, **trl_.ratio_stats(seen)}

    def update(self, model, batch, ref, tap=None):
        """One generation batch of TRL training: shuffled and split as `_prepare_inputs` does,
        `num_iterations` passes, an optimizer step every `gradient_accumulation_steps` micro-steps
        (a fresh optimizer from the trainer's args; the scheduler's first-step learning rate).
        `tap("loss", ...)` sees what each `_compute_loss` call is handed (rlbisect.check.observe),
        the reference log-probs TRL stored with the batch included (its KL term uses those, not `ref`)."""
        batch = self._own(batch)
        tr, args = self.trainer, self.trainer.args
        inputs = dict(batch["inputs"])
        inputs[trl_.ROW] = torch.arange(len(inputs["advantages"]))   # rides TRL's shuffle and split
        if ref is not None and tr.beta != 0.0 and "ref_per_token_logps" not in inputs:
            raise ValueError("TRL stored no reference log-probs with this batch (beta was 0 when it scored it)")
        opt, seen, micro, norms = trl_.optimizer(tr, model), list[tuple](), 0, []
        chunks = trl_.shuffled_chunks(tr, inputs, seed=0)
        if not trl_.one_step_per_batch(tr) and len(chunks) * tr.num_iterations < args.gradient_accumulation_steps:
            # a window longer than the batch straddles batches in training: here, as in the batch whose
            # first micro-batch ends a window, so its later ones use the stored old log-probs
            micro = args.gradient_accumulation_steps - 1
        with trl_.one_window(tr, args.gradient_accumulation_steps, tr.beta, seen, tap):
            args.steps_per_generation = len(chunks)          # the dapo normalizer as in training
            for _ in range(tr.num_iterations):
                for chunk in chunks:
                    trl_.training_step(tr, model, chunk)
                    micro += 1
                    if micro % args.gradient_accumulation_steps == 0:
                        norms.append(trl_.clip_and_step(tr, model, opt))
            if micro % args.gradient_accumulation_steps:
                norms.append(trl_.clip_and_step(tr, model, opt))
        return {**trl_.ratio_stats(seen), "grad_norm": norms[0] if norms else float("nan"),
                "optimizer_steps": len(norms)}

    def make_ref(self, model):
        tr = self.trainer
        if tr.beta == 0.0:
            return None
        if tr.ref_model is None or tr.ref_model is tr.model:    # PEFT: the base with the adapter off; or a bug
            return model
        return clone(tr.accelerator.unwrap_model(tr.ref_model))

    def pad(self, batch, extra):
        """`extra` more completion positions on the right, where TRL pads completions."""
        batch = self._own(batch)
        inp, pad_id = dict(batch["inputs"]), trl_.tokenizer(self.trainer).pad_token_id
        for key, value in [("completion_ids", pad_id), ("completion_mask", 0), ("old_per_token_logps", 0.0),
                           ("ref_per_token_logps", 0.0), ("sampling_per_token_logps", 0.0), ("tool_mask", 1)]:
            if key in inp:
                x = inp[key]
                inp[key] = torch.cat([x, x.new_full((x.shape[0], extra), value)], 1)
        # one step per batch: TRL's loss forms its own old log-probs (the current ones, detached) and
        # never reads ours, so the padded copy of the cached ones stands in for the identity test
        current = {k: torch.cat([v, v.new_zeros(v.shape[0], extra)], 1)
                   for k, v in batch.get("_current_logp", {}).items()}
        return {**batch, "inputs": inp, "_current_logp": current, "_owners": dict(batch.get("_owners", {}))}

    def replay(self, snap, bug=None):
        """Re-run a step `rlbisect.frameworks.trl.callback.SnapshotCallback` saved from this
        trainer (`rlbisect replay STEP.pt --adapter SPEC`); the fault, if any, is this adapter's."""
        from rlbisect.frameworks.trl.callback import replay_step
        replayed = replay_step(self.trainer, self.policy(), snap)
        recorded = snap.config.get("loss_type")
        if recorded not in (None, self.loss_type):
            replayed.notes.append(f"recorded with loss_type {recorded}, replayed with {self.loss_type}")
        return replayed

    def with_rewards(self, batch, rewards):
        """The same completions scored with other rewards, advantages by TRL's own code."""
        batch = self._own(batch)
        w = self.trainer.reward_weights.float()
        per_func = torch.full((len(rewards), len(w)), float("nan"))
        per_func[:, 0] = rewards.float() / w[0]      # nansum over functions gives back `rewards`
        out = trl_.scored_again(self.trainer, batch["raw"], batch["generated"], per_func)
        inp = batch["inputs"]
        same = all(torch.equal(out[k], inp[k]) for k in ("prompt_ids", "completion_ids") if k in inp and k in out)
        # the same tokens: the remembered log-probs still hold (they do not depend on rewards)
        return {**batch, "inputs": out, "per_func": per_func, **({} if same else {"_current_logp": {}, "_owners": {}})}


def demo(episodes: int = 32, seed: int = 1, kl_coef: float = 0.1, bug: Optional[str] = None, **settings: Any):
    """The adapter over a tiny GRPOTrainer built in code (`tiny.py`); ``settings`` are its
    construction options (loss_type, num_iterations, steps_per_generation, gradient_accumulation_steps,
    bf16, lr, temperature, and any other GRPOConfig field: mask_truncated_completions, entropy_coef,
    scale_rewards, ...). It offers ``with_settings`` (the same fault at other settings) and, where its
    objective is stated exactly, the ``variants`` in declared.py."""
    from rlbisect.frameworks.trl import tiny
    require_trl()
    trainer = tiny.build_trainer(episodes=episodes, kl_coef=kl_coef, **settings)
    tiny.inject(trainer, bug)

    def factory(**other: Any) -> GRPOAdapter:
        other = {**settings, **other}
        return demo(episodes, seed, other.pop("kl_coef", kl_coef), bug, **other)
    # a variant inherits these settings: offered only where the objective here is stated exactly
    stated = not declared.objective(trainer)[1]
    key = repr(("demo", episodes, kl_coef, bug, sorted(settings.items())))   # the same settings score alike
    adapter = GRPOAdapter(trainer, episodes=episodes, seed=seed, factory=factory,
                          variants=None if stated else {}, key=key, fresh=True)
    adapter.faults = list(tiny.FAULTS)
    return adapter
