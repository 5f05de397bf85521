"""rlbisect's adapter for verl's actor update, driven on CPU in one process (see `_internals.py`).

    rlbisect check --adapter rlbisect.frameworks.verl:demo
    rlbisect check --adapter rlbisect.frameworks.verl:demo --adapter-opt loss_agg_mode=seq-mean-token-mean

Probe points: the probe batch is sampled by HF `generate` (the sampler's record is the truth),
scored by verl's `NaiveRewardManager`, its advantages by verl's estimator dispatch, its old and
reference log-probs by verl's engine forward (`forward_backward_batch(forward_only=True)`); `loss`
is the engine's `forward_step` with verl's `ppo_loss` over the rows as one micro-batch; `backward`
is `forward_backward_batch` (verl's micro-batch split, a backward per micro-batch); `update` is
`ActorWorker.train_mini_batch`'s loop: verl's mini-batch iterator, `train_batch` per mini-batch
(zero_grad, forward_backward_batch, `optimizer_step` with its clip) and an optimizer from verl's
`build_optimizer`. Layout: P = the response positions, rows group by group (uid per prompt).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from rlbisect.check.adapter import Prepared, Truth
from rlbisect.check.capabilities import Capabilities
from rlbisect.check.copies import clone
from rlbisect.frameworks.verl import _internals as v, declared, tiny

ROW = "rlbisect_row"      # rides verl's mini-batch shuffle and micro-batch split

DEFAULTS: dict[str, Any] = dict(
    loss_agg_mode="token-mean", adv_estimator="grpo", norm_adv_by_std_in_grpo=True, use_kl_loss=True,
    kl_loss_type="low_var_kl", kl_loss_coef=0.1, entropy_coeff=0.0, temperature=1.0, clip_ratio_low=0.2,
    clip_ratio_high=0.2, mini_batches=2, micro_batch_size=2, use_dynamic_bsz=False, max_token_len=28,
    ppo_epochs=1, lr=1e-3, clip_grad=1.0, loss_scale_factor=None, shuffle=True)


class VerlAdapter:
    """rlbisect's TrainerAdapter over verl's actor code at ``settings`` (DEFAULTS' keys)."""

    def __init__(self, episodes: int = 16, seed: int = 1, bug: Optional[str] = None, **settings: Any):
        self.verl_version = v.require_verl()
        unknown = sorted(set(settings) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"unknown setting {unknown[0]!r} (settings: {', '.join(DEFAULTS)})")
        self.s = {**DEFAULTS, **settings}
        if episodes % (tiny.GROUP * self.s["mini_batches"]):
            raise ValueError(f"episodes must be a multiple of {tiny.GROUP} x mini_batches")
        self.episodes, self.seed, self.bug, self.fault = episodes, seed, bug, lambda: tiny.inject(bug)
        v.accepted(self.verl_version, self.s, lambda: self.config(rows=episodes // self.s["mini_batches"]))
        self.objective, self.objective_why = declared.objective(self.s)
        steps = self.s["mini_batches"] * self.s["ppo_epochs"]
        self.capabilities = Capabilities(sampler_logp=True, one_step_per_batch=steps == 1,
                                         by_design=declared.by_design(self.s))
        self.variants = dict(declared.VARIANTS) if not self.objective_why else {}
        self.faults = list(tiny.FAULTS)
        self._initial = tiny.policy(0)
        self.run_variant = {k: val for d in self.variants.values() for k, val in d.items()} or None

    def train_run(self, steps: int, seed: int, eval_every: int, tap=None, settings: Optional[dict] = None,
                  on_worker=None):
        from rlbisect.frameworks.verl import run
        return run.train_run(self, steps, seed, eval_every, tap, settings, on_worker)

    def run_spec(self, steps: int, settings: Optional[dict] = None):
        from rlbisect.frameworks.verl import run
        return run.run_spec(self, steps, settings)

    def with_settings(self, **settings) -> "VerlAdapter":
        return VerlAdapter(self.episodes, self.seed, self.bug, **{**self.s, **settings})

    # -- verl's config, batch and passes --------------------------------------------------------
    def config(self, kl: bool = True, rows: int = 0):
        from verl.workers.config import ActorConfig
        s = self.s
        return ActorConfig(strategy="fsdp", ppo_mini_batch_size=max(rows, 1), rollout_n=tiny.GROUP,
                           ppo_micro_batch_size_per_gpu=s["micro_batch_size"], use_dynamic_bsz=s["use_dynamic_bsz"],
                           clip_ratio=s["clip_ratio_low"], clip_ratio_low=s["clip_ratio_low"],
                           clip_ratio_high=s["clip_ratio_high"], loss_agg_mode=s["loss_agg_mode"],
                           loss_scale_factor=s["loss_scale_factor"], entropy_coeff=s["entropy_coeff"],
                           use_kl_loss=bool(kl and s["use_kl_loss"]), kl_loss_type=s["kl_loss_type"],
                           kl_loss_coef=s["kl_loss_coef"], ppo_epochs=s["ppo_epochs"], shuffle=s["shuffle"])

    def _nopad(self, td, global_batch_size: int):
        s = self.s
        return v.no_padding(td, s["temperature"], s["micro_batch_size"], s["use_dynamic_bsz"], s["max_token_len"],
                            s["entropy_coeff"] != 0.0, global_batch_size)

    def _logp(self, model, td) -> torch.Tensor:
        with self.fault():
            return v.log_probs(model, self._nopad(td, len(td)))

    def _advantages(self, td, index) -> torch.Tensor:
        from verl.trainer.config import AlgoConfig
        s = self.s
        norm = s["norm_adv_by_std_in_grpo"] or self.bug == "std_flag_ignored"
        algo = AlgoConfig(adv_estimator=s["adv_estimator"], norm_adv_by_std_in_grpo=norm)
        return v.advantages(s["adv_estimator"], td["token_level_rewards"], td["response_mask"], index, norm, algo)

    # -- the Protocol ---------------------------------------------------------------------------
    def policy(self):
        return clone(self._initial)

    def probe_batch(self):
        """`episodes / GROUP` tasks drawn by the seed, each GROUP times (one uid per task), sampled by
        HF generate from the step-0 policy, scored by verl."""
        all_tasks = tiny.tasks()
        pick = torch.randperm(len(all_tasks), generator=torch.Generator().manual_seed(self.seed))
        rows = [all_tasks[int(i)] for i in pick[: self.episodes // tiny.GROUP] for _ in range(tiny.GROUP)]
        return self.scored(self._initial, rows, self.seed)

    def scored(self, model, rows: list[dict], sample_seed: int):
        """One generation batch as verl's `fit` forms it before the actor update: sampled from
        ``model`` (HF generate standing in for the rollout), rewards from `NaiveRewardManager`,
        advantages from the estimator, old log-probs from ``model`` and reference log-probs from the
        step-0 policy through the engine's forward -> (batch, truth)."""
        from verl import DataProto
        from verl.workers.reward_manager.naive import NaiveRewardManager
        prompts, pmask = tiny.prompts_tensor(rows)
        responses, slogp, owned, drawn = tiny.sample(model, prompts, pmask, self.s["temperature"], sample_seed)
        eos = tiny.EOS
        if self.bug == "pad_in_mask":       # the mask as if no EOS were ever found (verl#3805)
            eos = -1
        td = v.padded_batch(prompts, pmask, responses, eos, {ROW: torch.arange(len(rows))})
        if self.bug == "eos_unmasked":
            td["response_mask"] = td["response_mask"] * (td["responses"] != tiny.EOS)
        uid = np.array([str(r["id"]) for r in rows], dtype=object)
        data = DataProto.from_dict(tensors={k: td[k] for k in ("prompts", "responses", "attention_mask")},
                                   non_tensors={"data_source": np.array(["tiny"] * len(rows), dtype=object),
                                                "reward_model": np.array([{"ground_truth": r["answer"]} for r in rows],
                                                                         dtype=object)})
        td["token_level_rewards"] = NaiveRewardManager(tiny.tokenizer(), 0, tiny.compute_score)(data)
        td["advantages"] = self._advantages(td, uid)
        td["old_log_probs"] = self._logp(model, td)
        if self.s["use_kl_loss"]:
            td["ref_log_prob"] = td["old_log_probs"].clone() if self.bug == "ref_is_policy" \
                else self._logp(self._initial, td)
        truth = Truth(owned=owned, sample_logp=slogp, rewards=td["token_level_rewards"].sum(-1), group_size=tiny.GROUP,
                      drawn=drawn, rescored=tiny.rescored(rows, responses, drawn),
                      tasks=torch.tensor([r["id"] for r in rows]))
        return {"td": td, "uid": uid, "key": self._key()}, truth

    def _key(self) -> tuple:
        """What the stored old and reference log-probs and the advantages depend on."""
        s = self.s
        return (s["temperature"], s["adv_estimator"], s["norm_adv_by_std_in_grpo"], s["use_kl_loss"], self.bug)

    def _own(self, batch: dict) -> dict:
        """``batch`` as this adapter's settings score it: a batch sampled at other settings (a
        variant) gets its old and reference log-probs and advantages from verl again, here."""
        key = self._key()
        if batch.get("key") == key:
            return batch
        mine = batch.setdefault("_scored_by", {})
        if key not in mine:
            td = batch["td"].clone()
            td["advantages"] = self._advantages(td, batch["uid"])
            td["old_log_probs"] = self._logp(self._initial, td)
            if self.s["use_kl_loss"]:
                td["ref_log_prob"] = td["old_log_probs"].clone() if self.bug == "ref_is_policy" \
                    else self._logp(self._initial, td)
            mine[key] = {"td": td, "uid": batch["uid"], "key": key}
        return mine[key]

    def prepare(self, model, batch):
        batch = self._own(batch)
        td = batch["td"]
        return Prepared(td["response_mask"].float(), td["old_log_probs"], td["advantages"][:, 0].float())

    def log_probs(self, model, batch, rows=None):
        batch = self._own(batch)
        td = batch["td"] if rows is None else batch["td"][torch.as_tensor(rows)]
        return self._logp(model, td)

    def _rows(self, batch, rows, prep: Prepared):
        td = batch["td"][torch.as_tensor(rows)].clone()
        mask = prep.mask[rows].to(td["response_mask"].dtype)
        td["response_mask"] = mask
        td["old_log_probs"] = prep.old_logp[rows]
        td["advantages"] = prep.advantages[rows][:, None].float() * mask    # verl's layout: scalar x mask
        return td

    def loss(self, model, batch, rows, prep, ref=None, tap=None):
        """verl's `forward_step` with `ppo_loss` over `rows` as one micro-batch (the engine's
        mini-batch token count and size set as `forward_backward_batch` sets them). ``ref`` switches
        the KL loss on; its reference log-probs are the ones stored with the batch."""
        from verl.utils.tensordict_utils import assign_non_tensor
        td = self._nopad(self._rows(self._own(batch), rows, prep), len(rows))
        assign_non_tensor(td, sp_size=1, batch_num_tokens=int(td["loss_mask"].sum()), dp_size=1)
        seen: list = []
        fn = v.loss_function(self.config(kl=ref is not None, rows=len(rows)), tap, lambda d: d[ROW], seen)
        v.one_process_group()
        with self.fault(), v.on_cpu():
            loss, _ = v.engine(model, seen=seen).forward_step(td, loss_function=fn, forward_only=False)
        return loss, {"loss": float(loss.detach())}

    def backward(self, model, batch, rows, prep):
        """verl's `forward_backward_batch` over `rows` as one mini-batch (no KL, like `loss`)."""
        batch = self._own(batch)
        seen: list = []
        td = self._nopad(self._rows(batch, rows, prep), len(rows))
        fn = v.loss_function(self.config(kl=False, rows=len(rows)), _recording(seen), lambda d: d[ROW])
        with self.fault():
            out = v.forward_backward(model, td, fn)
        return {"loss": float(sum(out["loss"])), **_ratio_stats(seen)}     # the micro-batches' sum

    def update(self, model, batch, ref, tap=None):
        """`ActorWorker.train_mini_batch`: verl's mini-batch iterator over the batch (shuffled by the
        actor's data-loader seed), `train_batch` per mini-batch, a fresh optimizer from
        `build_optimizer`; the loss tap sees what each `ppo_loss` call consumed."""
        batch = self._own(batch)
        return self.train_step(model, batch, ref is not None, tap, v.optimizer(model, self.s["lr"], 0.0))

    def train_step(self, model, batch, kl: bool, tap, opt, worker=None) -> dict:
        """One update through `worker.train_mini_batch` (default: the demo's, `worker.py`)."""
        s, td = self.s, batch["td"]
        size = len(td) // s["mini_batches"]
        seen: list = []
        worker = worker or self.worker(model, opt, kl, size)
        worker.tap = _recording(seen, tap)
        with self.fault():
            metrics = worker.train_mini_batch(self.update_batch(td, size))
        return {**_ratio_stats(seen), "grad_norm": float(metrics["grad_norm"][0]),
                "optimizer_steps": len(metrics["grad_norm"])}

    def update_batch(self, td, size: int):
        """The batch `RayPPOTrainer._update_actor` hands the actor: no padding, the mini-batch keys."""
        from verl.utils.tensordict_utils import assign_non_tensor
        out = self._nopad(td, size)
        assign_non_tensor(out, mini_batch_size=size, epochs=self.s["ppo_epochs"], seed=42,
                          dataloader_kwargs={"shuffle": self.s["shuffle"]})
        return out

    def worker(self, model, opt, kl: bool, size: int):
        from rlbisect.frameworks.verl.worker import DemoWorker as Worker
        return Worker(model, opt, self.s["clip_grad"], self.config(kl=kl, rows=size), lambda d: d[ROW])

    def make_ref(self, model):
        if not self.s["use_kl_loss"]:
            return None
        return model if self.bug == "ref_is_policy" else clone(self._initial)

    def pad(self, batch, extra):
        batch = self._own(batch)
        td = batch["td"].clone()
        for key, value in [("responses", tiny.PAD), ("attention_mask", 0), ("position_ids", 0),
                           ("response_mask", 0), ("old_log_probs", 0.0), ("ref_log_prob", 0.0), ("advantages", 0.0),
                           ("token_level_rewards", 0.0)]:
            if key in td.keys():
                x = td[key]
                td[key] = torch.cat([x, x.new_full((x.shape[0], extra), value)], 1)
        td["input_ids"] = torch.cat([td["prompts"], td["responses"]], 1)
        from verl.utils.tensordict_utils import TensorDict
        return {**batch, "td": TensorDict({k: td[k] for k in td.keys()}, batch_size=[len(td)])}

    def with_rewards(self, batch, rewards):
        batch = self._own(batch)
        td = batch["td"].clone()
        last = (td["response_mask"].sum(-1).long() - 1).clamp(min=0)
        scores = torch.zeros_like(td["token_level_rewards"])
        scores[torch.arange(len(td)), last] = rewards.float()
        td["token_level_rewards"] = scores
        td["advantages"] = self._advantages(td, batch["uid"])
        return {**batch, "td": td}


def _recording(seen: list, tap=None):
    """A loss tap keeping (log-probs, old, mask) per call for the ratio statistics, passing on to ``tap``."""
    def record(event, rows, mask, old_logp, logp=None, logits=None, targets=None, **values):
        got = logp if logp is not None else \
            logits.float().log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
        seen.append((got.detach(), old_logp, mask))
        if tap is not None:
            tap(event, rows=rows, mask=mask, old_logp=old_logp, logp=logp, logits=logits, targets=targets, **values)
    return record


def _ratio_stats(seen: list) -> dict:
    hi, lo, kls = 1.0, 1.0, []
    for logp, old, mask in seen:
        log_r = (logp - old) * mask
        on = mask > 0
        if on.any():
            r = log_r.exp()
            hi, lo = max(hi, float(r[on].max())), min(lo, float(r[on].min()))
            kls.append(float((((r - 1) - log_r) * mask).sum() / mask.sum()))
    return {"ratio_max": hi, "ratio_min": lo, "approx_kl": sum(kls) / len(kls) if kls else 0.0}


def demo(episodes: int = 16, seed: int = 1, kl_coef: Optional[float] = None, bug: Optional[str] = None,
         **settings: Any) -> VerlAdapter:
    """The adapter over verl's actor code with the tiny policy (`tiny.py`); ``settings`` are
    DEFAULTS' keys (loss_agg_mode, adv_estimator, kl_loss_type, entropy_coeff, use_dynamic_bsz, ...)."""
    import warnings
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v.require_verl()
        if kl_coef is not None:
            settings = {"kl_loss_coef": kl_coef, "use_kl_loss": bool(kl_coef), **settings}
        return VerlAdapter(episodes=episodes, seed=seed, bug=bug, **settings)
