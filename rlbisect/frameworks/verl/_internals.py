"""Every reach into verl's code, in one place, each naming the verl code it drives.

Read against verl 0.9.1. The update runs verl's own engine code in this one CPU process:
`FSDPEngineWithLMHead.forward_backward_batch` / `forward_step` / `prepare_model_inputs` /
`prepare_model_outputs` (verl/workers/engine/fsdp/transformer_impl.py), `BaseEngine.train_batch` and
`FSDPEngine.optimizer_step` (zero_grad, accumulate, clip, step), with verl's loss function
`verl.workers.utils.losses.ppo_loss` (policy loss from `get_policy_loss_fn`, `agg_loss`,
`kl_penalty`, entropy), verl's micro-batch split (`verl.workers.engine.utils.prepare_micro_batches`,
dynamic batch size included) and mini-batch iterator (`tensordict_utils.make_iterator`, as
`ActorWorker.train_mini_batch` calls it). The engine object is built without `__init__` (no FSDP
wrap, no device mesh): the module is the plain Hugging Face model, which is exactly the branch
`optimizer_step` and `_gradient_sync_context` take for an unwrapped module. Nothing is pinned to a
version: :func:`missing` says which of these names this verl lacks.
"""

from __future__ import annotations

import contextlib
import warnings
from functools import partial
from typing import Any, Callable, Iterator, Optional

import torch

READ = "0.9.1"
#: (module, name) every probe point needs
NEEDS = (("verl.workers.utils.losses", "ppo_loss"), ("verl.workers.utils.padding", "left_right_2_no_padding"),
         ("verl.workers.utils.padding", "no_padding_2_padding"), ("verl.workers.engine.fsdp.transformer_impl",
                                                                  "FSDPEngineWithLMHead"),
         ("verl.workers.engine.utils", "prepare_micro_batches"), ("verl.trainer.ppo.core_algos", "agg_loss"),
         ("verl.trainer.ppo.core_algos", "get_adv_estimator_fn"), ("verl.trainer.ppo.core_algos", "kl_penalty"),
         ("verl.utils.tensordict_utils", "make_iterator"), ("verl.workers.config", "ActorConfig"),
         ("verl.utils.torch_functional", "get_response_mask"), ("verl.workers.reward_manager.naive",
                                                                 "NaiveRewardManager"))


def missing() -> list[str]:
    """The members of :data:`NEEDS` this verl lacks (feature detection, not a version pin)."""
    import importlib
    gone = []
    for module, name in NEEDS:
        try:
            if not hasattr(importlib.import_module(module), name):
                gone.append(f"{module}.{name}")
        except Exception as e:            # a module that does not import here is as good as absent
            gone.append(f"{module} ({type(e).__name__})")
    return gone


def require_verl() -> str:
    """The imported verl's version; AdapterNotFound without verl, AdapterUnfit when a name every
    probe point needs is gone (exit 125: the checks could not run on this code)."""
    from rlbisect.check.loading import AdapterNotFound, AdapterUnfit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # verl warns for every engine backend it cannot import
        try:
            import verl
        except ImportError:
            raise AdapterNotFound("rlbisect.frameworks.verl needs verl: pip install 'rlbisect[verl]'") from None
        version = str(getattr(verl, "__version__", "unknown"))
        gone = missing()
        if not gone:
            from rlbisect.frameworks.verl._compat import without_flash_attn
            without_flash_attn()
    if gone:
        raise AdapterUnfit(f"rlbisect cannot run on verl {version}: it lacks {', '.join(gone)}, which every "
                           "probe point needs (rlbisect/frameworks/verl/_internals.py)")
    return version


def accepted(version: str, s: dict, config: Callable[[], Any]) -> None:
    """verl's own validation of the settings ``s``, at once (a mode or estimator a later release
    added is refused when the adapter is built, not halfway through the checks): ValueError."""
    from verl.trainer.ppo import core_algos
    zero = torch.zeros(1, 1)
    for key, attempt in (("loss_agg_mode", config), ("adv_estimator", lambda: core_algos.get_adv_estimator_fn(
            s["adv_estimator"])), ("kl_loss_type", lambda: core_algos.kl_penalty(zero, zero, s["kl_loss_type"]))):
        try:
            attempt()
        except (ValueError, KeyError, NotImplementedError) as e:
            raise ValueError(f"verl {version} does not accept {key}={s[key]!r}: {str(e) or type(e).__name__}") from None


def one_process_group() -> None:
    """The engine all-reduces the mini-batch's token count over its data-parallel group: a gloo
    group of one process, made once (an in-memory store, no network)."""
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


@contextlib.contextmanager
def on_cpu() -> Iterator[None]:
    """verl asks its platform for the accelerator's id (CUDA without one): the engine module's
    names point at the CPU for the duration."""
    from verl.workers.engine.fsdp import transformer_impl as ti
    saved = ti.get_device_id, ti.get_device_name
    ti.get_device_id, ti.get_device_name = (lambda: "cpu"), (lambda: "cpu")
    try:
        yield
    finally:
        ti.get_device_id, ti.get_device_name = saved


class _EngineConfig:
    use_no_sync_for_gradient_accumulation = True
    entropy_checkpointing = False
    entropy_from_logits_with_chunking = False


def engine(module: torch.nn.Module, optimizer=None, clip_grad: float = 1.0, seen: Optional[list] = None):
    """verl's FSDP LM-head engine around a plain module (see the module docstring). ``seen`` gets
    each forward's raw logits (before verl scales them by the temperature), for the loss tap."""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    class OneProcess(FSDPEngineWithLMHead):
        def prepare_model_outputs(self, output, output_args, micro_batch, *rest, **kw):   # + logits_processor_func (0.8+)
            if seen is not None and getattr(output, "logits", None) is not None:
                # the response positions' logits, put back in place so the loss's gradient flows
                # through them (same values): the tap is shown a tensor on the loss's graph
                idx = response_index(micro_batch, output.logits.shape[1])
                resp = output.logits.gather(1, idx[..., None].expand(-1, -1, output.logits.shape[-1]))
                output["logits"] = output.logits.scatter(1, idx[..., None].expand_as(resp), resp)
                seen.append(resp)
            return super().prepare_model_outputs(output, output_args, micro_batch, *rest, **kw)

        def get_data_parallel_group(self):
            return None

        def get_data_parallel_size(self):
            return 1

        def get_data_parallel_rank(self):
            return 0

        def is_mp_src_rank_with_outputs(self):
            return True

    e = OneProcess.__new__(OneProcess)
    attrs: dict[str, Any] = dict(module=module, pad_to_length=False, pad_to_length_bucket=None, use_ulysses_sp=False,
                                 ulysses_sequence_parallel_size=1, _autocast_dtype=torch.float32, scaler=None,
                                 engine_config=_EngineConfig(), optimizer=optimizer, _qat_enabled=False,
                                 optimizer_config=type("Opt", (), {"clip_grad": clip_grad})())
    e.__dict__.update(attrs)
    return e


def padded_batch(prompts: torch.Tensor, prompt_mask: torch.Tensor, responses: torch.Tensor, eos: int,
                 extra: dict) -> Any:
    """verl's left-right padded batch (prompts left-padded, responses right-padded) as its rollout
    hands it on: the response attention mask from verl's `get_response_mask` (up to and including
    the first EOS), position ids, and `response_mask` = the response part of the attention mask
    (ray_trainer's `compute_response_mask`)."""
    from verl.utils.tensordict_utils import TensorDict     # tensordict's, as verl imports it
    from verl.utils.torch_functional import get_response_mask
    resp_attn = get_response_mask(response_id=responses, eos_token=eos, dtype=prompt_mask.dtype)
    attn = torch.cat([prompt_mask, resp_attn], 1)
    pos = (attn.cumsum(1) - 1).clamp(min=0)
    return TensorDict({"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
                       "attention_mask": attn, "position_ids": pos, "response_mask": resp_attn.float(), **extra},
                      batch_size=[prompts.shape[0]])


def no_padding(td, temperature: float, micro_batch_size: int, dynamic_bsz: bool, max_token_len: int,
               entropy: bool, global_batch_size: int) -> Any:
    """The padded batch as the trainer hands it to the actor: `left_right_2_no_padding`, then the
    non-tensor keys `_update_actor` and `ActorWorker.train_batch` assign."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding
    out = left_right_2_no_padding(td.clone())
    tu.assign_non_tensor(out, temperature=temperature, use_remove_padding=False, use_dynamic_bsz=dynamic_bsz,
                         micro_batch_size_per_gpu=micro_batch_size, max_token_len_per_gpu=max_token_len,
                         use_fused_kernels=False, calculate_entropy=entropy, global_batch_size=global_batch_size)
    return out


def select(td, rows: torch.Tensor) -> Any:
    """Rows of a no-padding batch, its non-tensor keys kept (tensordict indexes nested tensors)."""
    from verl.utils import tensordict_utils as tu
    return tu.index_select_tensor_dict(td, rows) if hasattr(tu, "index_select_tensor_dict") else td[rows]


def log_probs(module: torch.nn.Module, td) -> torch.Tensor:
    """verl's forward-only pass (`forward_backward_batch(forward_only=True)` as `infer_batch` runs it
    for compute_log_prob) -> [B, response length] log pi(response token) at the temperature."""
    from verl.workers.utils.padding import no_padding_2_padding
    one_process_group()
    with torch.no_grad(), on_cpu():
        out = engine(module).forward_backward_batch(td, loss_function=None, forward_only=True)
    return no_padding_2_padding(out["model_output"]["log_probs"], td).float()


def loss_function(config, tap: Optional[Callable] = None, rows_of: Optional[Callable] = None,
                  logits_seen: Optional[list] = None, wrap: Optional[Callable] = None) -> Callable:
    """`ppo_loss` bound to the actor config, as `ActorWorker` binds it; with ``tap``, shown what each
    call consumed (its response mask, old log-probs, advantages, reference log-probs, the
    log-probs still on the graph, the raw logits and targets of the response positions) and the
    micro-batch's own loss (times nothing: verl normalizes by the mini-batch, see `undo_scale`)."""
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding
    fn = wrap(ppo_loss) if wrap is not None else ppo_loss

    def observed(model_output, data, dp_group=None):
        from verl.workers.utils import losses
        # ppo_loss slices the response log-probs out of the engine's output itself; it is handed
        # this slice instead (the same values), so the tap's `logp` is the tensor on its graph
        logp = no_padding_2_padding(model_output["log_probs"], data)
        slice_ = losses.no_padding_2_padding
        losses.no_padding_2_padding = lambda t, d: logp if t is model_output["log_probs"] else slice_(t, d)
        try:
            loss, metrics = fn(config, model_output=model_output, data=data, dp_group=dp_group)
        finally:
            losses.no_padding_2_padding = slice_
        if tap is not None:
            padded = data.select("response_mask", "old_log_probs", "advantages",
                                 *(["ref_log_prob"] if "ref_log_prob" in data.keys() else [])).to_padded_tensor()
            # the logits only where the entropy term needs them: with log-probs the identity is taken
            # on verl's own tensor, exact where a flat group's gradient is 0 (a logits recomputation
            # leaves ~1e-9 there, which the relative gradient error reads as 100%)
            logits = logits_seen[-1] if logits_seen and config.entropy_coeff else None
            tap("loss", rows=rows_of(data) if rows_of else None, mask=padded["response_mask"].float(),
                old_logp=padded["old_log_probs"], advantages=padded["advantages"][:, 0] if padded["advantages"].ndim > 1
                else padded["advantages"], ref_logp=padded.get("ref_log_prob") if config.use_kl_loss else None,
                logp=logp if logits is None else None, logits=logits,
                targets=data["responses"] if logits is not None else None, loss=own_loss(config, loss, data, padded))
        return loss, metrics
    return partial(observed)


def own_loss(config, loss: torch.Tensor, data, padded) -> Optional[torch.Tensor]:
    """The micro-batch's own loss: verl divides each micro-batch by the mini-batch's token count
    (token-mean) or row count (the seq-mean modes) set once in `forward_backward_batch`, so the
    micro-batch's share is scaled back to its own aggregate (the divide itself is checked at step 0:
    checks 6 and 19)."""
    mask = padded["response_mask"].float()
    mode = config.loss_agg_mode
    if mode == "token-sum":
        return loss
    if mode == "token-mean":
        return loss * (float(data["batch_num_tokens"]) / float(mask.sum().clamp(min=1)))
    if mode.startswith("seq-mean"):
        return loss * (float(data["global_batch_size"]) / float((mask.sum(-1) > 0).sum().clamp(min=1)))
    return None


def response_index(data, width: int) -> torch.Tensor:
    """[b, R] the padded path's positions whose logits predict each response token (position
    prompt_len + j - 1 predicts response token j: `no_padding_2_padding`'s shift)."""
    prompt_len = data["attention_mask"][:, : data["prompts"].shape[1]].sum(1)
    R = data["responses"].shape[1]
    return (prompt_len[:, None] - 1 + torch.arange(R)[None]).clamp(max=width - 1)


def forward_backward(module: torch.nn.Module, td, loss_fn: Callable, logits_seen: Optional[list] = None) -> dict:
    """verl's `forward_backward_batch`: the mini-batch's token count and size set once, its
    micro-batches (`prepare_micro_batches`), a backward per micro-batch. No optimizer step."""
    one_process_group()
    with on_cpu():
        return engine(module, seen=logits_seen).forward_backward_batch(td, loss_function=loss_fn)


def train_batch(module: torch.nn.Module, td, loss_fn: Callable, optimizer, clip_grad: float,
                logits_seen: Optional[list] = None) -> dict:
    """verl's `BaseEngine.train_batch`: zero_grad, `forward_backward_batch`, `optimizer_step`
    (clip to `clip_grad`, skip a non-finite norm, step) -> its output (the micro-batches' losses,
    the metrics with the norm before clipping)."""
    one_process_group()
    with on_cpu():
        return engine(module, optimizer=optimizer, clip_grad=clip_grad, seen=logits_seen).train_batch(
            td, loss_function=loss_fn)


def optimizer(module: torch.nn.Module, lr: float, weight_decay: float):
    """verl's `build_optimizer` from an `FSDPOptimizerConfig` (torch.optim.AdamW by default)."""
    from verl.workers.config.optimizer import FSDPOptimizerConfig, build_optimizer
    return build_optimizer(module.parameters(), FSDPOptimizerConfig(lr=lr, weight_decay=weight_decay))


def advantages(estimator: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
               norm_by_std: bool, algo_config=None) -> torch.Tensor:
    """ray_trainer's `compute_advantage` dispatch (not imported: ray_trainer needs Ray's extras):
    GRPO through `compute_grpo_outcome_advantage` with `norm_adv_by_std_in_grpo`, every other
    estimator through `get_adv_estimator_fn` with rewards, mask, config and the group index."""
    from verl.trainer.ppo import core_algos
    if estimator == "grpo":
        adv, _ = core_algos.compute_grpo_outcome_advantage(token_level_rewards=token_level_rewards,
                                                           response_mask=response_mask, index=index,
                                                           norm_adv_by_std_in_grpo=norm_by_std)
    else:
        fn = core_algos.get_adv_estimator_fn(estimator)
        adv, _ = fn(token_level_rewards=token_level_rewards, response_mask=response_mask, config=algo_config,
                    index=index)
    return adv
