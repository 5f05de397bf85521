"""rlbisect's adapter for TRL's GRPOTrainer: wrap a trainer you built, check it with TRL's own code.

    # my_adapter.py
    from rlbisect.frameworks.trl.adapter import GRPOAdapter
    def make_adapter(episodes=32, seed=1, kl_coef=0.1):
        trainer = GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(..., beta=kl_coef), ...)
        return GRPOAdapter(trainer, episodes=episodes, seed=seed)

    rlbisect check --adapter my_adapter.py:make_adapter

Every probe point runs TRL's code (`_generate_and_score_completions`, `compute_loss`,
`training_step`, `_get_per_token_logps_and_entropies`, its reference model); the reaches into its
private API live in `_trl_internals.py`. The sampler's log-probs are recorded on the path TRL
generates with (HF `generate`'s processed scores), and so are the tokens it drew per row
(`Truth.drawn`, check 13); `Truth.rescored` (check 16) is your reward functions applied again with
`GRPOConfig.reward_weights`; `update(..., tap)` (check 15) shows rlbisect's tap what each
`_compute_loss` call is handed. Layout: P = the completion's positions (column j is completion token j), rows
group by group as TRL lays them out.

`rlbisect check --adapter rlbisect.frameworks.trl:demo` runs the checks on a tiny GRPOTrainer built in
code (`trl_demo.py`); `--adapter-opt loss_type=dapo`, `num_iterations=2`, `bf16=true`, ...
"""

from __future__ import annotations

import copy
import weakref
from typing import Optional

import torch

from rlbisect.frameworks.trl import _internals as trl_
from rlbisect.check.adapter import Prepared, Truth
from rlbisect.check.capabilities import Capabilities

# TRL's loss types whose objective is PPO's clipped surrogate (check 10 applies to these)
PPO_CLIP = {"grpo", "bnpo", "dr_grpo", "dapo", "luspo"}
OTHER_OBJECTIVES = {"cispo", "sapo", "vespo"}     # check 10 is n/a for these
BY_DESIGN = {
    "bnpo": {"accumulated = one-pass gradient":
             "bnpo normalizes each microbatch by its own token count (TRL's documented choice), so "
             "accumulated microbatches differ from one pass unless they hold equal token counts"},
}


def require_tested_trl() -> str:
    """TRL's version, or a clear error when it is outside the versions the adapter was read against."""
    try:
        import trl
    except ImportError:
        raise ImportError("rlbisect.frameworks.trl.adapter needs TRL: pip install 'rlbisect[trl]'") from None
    from packaging.version import Version
    lo, hi = trl_.TESTED
    if not Version(lo) <= Version(trl.__version__) < Version(hi):
        raise RuntimeError(f"rlbisect.frameworks.trl.adapter is tested on TRL >={lo},<{hi}; this is TRL {trl.__version__}. "
                           "Its reaches into GRPOTrainer's private API (_trl_internals.py) may not hold here")
    return trl.__version__


class GRPOAdapter:
    """rlbisect's TrainerAdapter for a constructed `trl.GRPOTrainer`."""

    faults: list[str]   # set by demo(): the faults its tiny trainer can inject

    def __init__(self, trainer, episodes: Optional[int] = None, seed: int = 1):
        self.trl_version = require_tested_trl()
        self.trainer, self.seed = trainer, seed
        self.G = trainer.num_generations
        self.episodes = episodes or trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
        if self.episodes % self.G:
            raise ValueError(f"episodes ({self.episodes}) must be a multiple of num_generations ({self.G})")
        if trainer.use_vllm and not trainer.vllm_importance_sampling_correction:
            sampler_logp = False     # vLLM's log-probs are only kept for its correction
        else:
            sampler_logp = True
        self.loss_type = trainer.loss_type
        if self.loss_type not in PPO_CLIP | OTHER_OBJECTIVES:
            raise ValueError(f"loss_type {self.loss_type!r} is not one this adapter was tested on "
                             f"({', '.join(sorted(PPO_CLIP | OTHER_OBJECTIVES))})")
        self.objective = "ppo-clip" if self.loss_type in PPO_CLIP else self.loss_type
        self.capabilities = Capabilities(sampler_logp=sampler_logp,
                                         one_step_per_batch=trl_.one_step_per_batch(trainer),
                                         by_design=BY_DESIGN.get(self.loss_type, {}))
        self._initial = copy.deepcopy(trl_.unwrapped(trainer))      # step 0, before anything trains it

    # -- the Protocol ---------------------------------------------------------------------------

    def policy(self):
        return copy.deepcopy(self._initial)

    def probe_batch(self):
        """A generation batch of `episodes` completions (episodes / G prompts drawn by the seed from
        the trainer's dataset, each G times, as its RepeatSampler lays them out), sampled and
        scored by TRL; the truth from what the sampler recorded."""
        data = self.trainer.train_dataset
        pick = torch.randperm(len(data), generator=torch.Generator().manual_seed(self.seed))
        inputs = [dict(data[int(i)]) for i in pick[: self.episodes // self.G] for _ in range(self.G)]
        record: dict = {}
        torch.manual_seed(self.seed)          # HF sampling draws from the global generator
        with trl_.recording_generation(self.trainer, record):
            out = trl_.score(self.trainer, inputs)
        C = out["completion_ids"].shape[1]
        drawn = rescored = None
        if "sampler" in record:
            tokens, logp, owned = record["sampler"]
            owned, logp = self._fit(owned, C), self._fit(logp, C)
            drawn = record["drawn"]             # counted from generate's output, not TRL's mask
            rescored = trl_.configured_rewards(self.trainer, inputs, tokens, record["stop"])
        else:                                  # vLLM: its log-probs of the sampled tokens
            logp = out.get("sampling_per_token_logps")
            owned = (~torch.isnan(logp)).float() if logp is not None else trl_.loss_mask(out)
            logp = torch.nan_to_num(logp) if logp is not None else torch.zeros_like(owned)
        # the rewards the batch's advantages were formed from: TRL's per-function scores weighted
        # by the weights its scoring multiplies (`self.reward_weights`, sum_then_normalize)
        w = self.trainer.reward_weights.float()
        rewards = (record["rewards_per_func"].float() * w).nansum(1)
        batch = {"inputs": out, "raw": inputs, "generated": record["generated"]}
        return batch, Truth(owned, logp, rewards, self.G, drawn=drawn, rescored=rescored)

    @staticmethod
    def _fit(x: torch.Tensor, C: int) -> torch.Tensor:
        return x[:, :C] if x.shape[1] >= C else torch.cat([x, x.new_zeros(x.shape[0], C - x.shape[1])], 1)

    def prepare(self, model, batch):
        inp = batch["inputs"]
        old = inp.get("old_per_token_logps")
        if old is None:       # one step per batch: _compute_loss uses the current log-probs, detached
            old = self.log_probs(model, batch)
        return Prepared(trl_.loss_mask(inp), old, inp["advantages"].float())

    def log_probs(self, model, batch, rows=None):
        """Remembered per batch and weights: the key holds each parameter's in-place version
        counter, so weights changed in place (an optimizer step) are never served stale. With
        ``rows``, those rows alone (not remembered: check 11 asks for a few of a moved model)."""
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

    def _rows(self, batch, rows, prep: Prepared, ref=None) -> dict:
        """The TRL micro-batch of `rows`, with `prep`'s mask, old log-probs and advantages."""
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
        if ref is not None:
            out["ref_per_token_logps"] = trl_.per_token_logps(self.trainer, ref, out)
        out["num_items_in_batch"] = trl_.loss_mask(out).sum()
        return out

    def loss(self, model, batch, rows, prep, ref=None):
        beta = self.trainer.beta if ref is not None else 0.0
        inputs = self._rows(batch, rows, prep, ref)
        with trl_.one_window(self.trainer, 1, beta, []):
            loss = trl_.one_pass_loss(self.trainer, model, inputs)
        return loss, {"loss": float(loss.detach())}

    def backward(self, model, batch, rows, prep):
        """TRL's training_step over `rows` as one accumulation window of
        `gradient_accumulation_steps` micro-batches (without the KL term, like `loss`)."""
        ga = self.trainer.args.gradient_accumulation_steps
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
        `tap("loss", rows=, mask=, old_logp=, advantages=, logp=)` sees what each `_compute_loss`
        call is handed (rlbisect.check.observe)."""
        tr, args = self.trainer, self.trainer.args
        inputs = dict(batch["inputs"])
        inputs[trl_.ROW] = torch.arange(len(inputs["advantages"]))   # rides TRL's shuffle and split
        if ref is not None and tr.beta != 0.0:
            inputs["ref_per_token_logps"] = trl_.per_token_logps(tr, ref, inputs)
        opt, seen, micro, norms = trl_.optimizer(tr, model), list[tuple](), 0, []
        chunks = trl_.shuffled_chunks(tr, inputs, seed=0)
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
        return copy.deepcopy(tr.accelerator.unwrap_model(tr.ref_model))

    def pad(self, batch, extra):
        """`extra` more completion positions on the right, where TRL pads completions."""
        inp, pad_id = dict(batch["inputs"]), self.trainer._tokenizer.pad_token_id
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
        out = trl_.rescore(self.trainer, batch["raw"], batch["generated"], rewards)
        inp = batch["inputs"]
        same = all(torch.equal(out[k], inp[k]) for k in ("prompt_ids", "completion_ids") if k in inp and k in out)
        # the same tokens: the remembered log-probs still hold (they do not depend on rewards)
        return {**batch, "inputs": out, **({} if same else {"_current_logp": {}, "_owners": {}})}


def demo(episodes: int = 32, seed: int = 1, kl_coef: float = 0.1, bug: Optional[str] = None, **settings):
    """The adapter over a tiny GRPOTrainer built in code (`trl_demo.py`); ``settings`` are its
    construction options (loss_type, num_iterations, steps_per_generation,
    gradient_accumulation_steps, bf16, lr, temperature)."""
    from rlbisect.frameworks.trl import tiny as trl_demo
    require_tested_trl()
    trainer = trl_demo.build_trainer(episodes=episodes, kl_coef=kl_coef, **settings)
    trl_demo.inject(trainer, bug)
    adapter = GRPOAdapter(trainer, episodes=episodes, seed=seed)
    adapter.faults = list(trl_demo.FAULTS)
    return adapter
