"""A tiny GRPOTrainer built in code (no hub, no network): the trainer `rlbisect.frameworks.trl:demo` checks.

A random-init two-layer Qwen2 over a 20-word vocabulary, prompts "add A B =", a reward for
answering with the right digit word and one for stopping early (weighted 0.1). It learns nothing in a few steps and needs nothing: the checks
are identities of the update, which hold (or break) on any policy.

Faults (``bug=``) are monkeypatches on the trainer instance, each the shape of a real TRL-user bug,
so the tests can show every check failing on the fault it is meant for.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

WORDS = ["<pad>", "<eos>", "add", "=", *[f"d{i}" for i in range(10)], "the", "is", "so", "ok", "no", "yes"]
GROUP = 4            # completions per prompt
MAX_NEW = 6          # max completion tokens

# bug name -> what it does (the check meant to catch it, in brackets)
FAULTS = {
    "mask_shift": "the loss mask shifted one token right: trains on the token after EOS, skips the first (1)",
    "adv_sign": "advantages negated after scoring (8)",
    "old_logp_absent": "no old log-probs in a multi-step batch: the loss falls back to the current ones (7)",
    "old_logp_detached": "the loss ignores the old log-probs it is given and uses the current ones (7)",
    "ref_is_policy": "the reference model is the policy itself, not a frozen copy (9)",
    "accum_unscaled": "the loss is not divided by the gradient accumulation steps (6)",
    "sampler_temp": "generation samples at temperature 0.7, the trainer scores at 1.0 (2)",
    "eos_unmasked": "the completion mask drops the EOS token: the policy is never trained to stop (13, 1)",
    "adv_renorm": "advantages re-whitened per micro-batch inside the loss, after TRL scored them (15)",
    "reward_weight_ignored": "scoring sums the reward functions unweighted, ignoring reward_weights (16)",
    "reward_misaligned": "reward functions see the dataset columns one group off their completions (16)",
    "ref_logp_untempered": "the reference model's LM head built without the temperature: TRL stores reference "
                           "log-probs at temperature 1 (20, at the temperature-0.7 variant)",
    "items_count_truncated": "the token count a token-summed loss divides by includes the completions "
                             "mask_truncated_completions drops (run-level: mask and advantages, at dapo)",
}


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="no"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def _model_dir(seed: int) -> Path:
    """The tiny policy saved once per process-independent key, so TRL can load its reference from
    the same path (a policy passed as an instance is re-loaded by name for the reference)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg: dict[str, Any] = dict(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                               tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, bos_token_id=None)
    key = hashlib.sha256(repr((sorted(cfg.items()), seed)).encode()).hexdigest()[:12]
    root = Path(os.environ.get("RLBISECT_CACHE") or tempfile.gettempdir())
    where = root / f"rlbisect-trl-demo-{key}"
    if not (where / "config.json").is_file():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(Qwen2Config(**cfg))
        root.mkdir(parents=True, exist_ok=True)    # RLBISECT_CACHE may name a folder not made yet
        tmp = Path(tempfile.mkdtemp(dir=root))
        model.save_pretrained(tmp)
        _tokenizer().save_pretrained(tmp)
        try:
            os.replace(tmp, where)
        except OSError:     # another process won the race: use its copy
            pass
    return where


@functools.lru_cache(maxsize=1)
def _dataset(n: int = 48):
    from datasets import Dataset
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):          # `id`: the task each prompt is (rlbisect's run-level task checks)
        a, b = torch.randint(0, 5, (2,), generator=g).tolist()
        # prompts of three lengths, so TRL pads them (on the left): prompts of one length never
        # showed a prompt padded on the wrong side
        rows.append({"id": i, "prompt": "the " * (i % 3) + f"add d{a} d{b} =", "answer": f"d{a + b}"})
    return Dataset.from_list(rows)


def answer_reward(completions, answer, **kwargs) -> list[float]:
    """1 for the right digit word first, 0.5 for it anywhere."""
    out = []
    for text, want in zip(completions, answer):
        words = text.split()
        out.append(1.0 if words[:1] == [want] else 0.5 if want in words else 0.0)
    return out


def brevity_reward(completions, **kwargs) -> list[float]:
    """1 for stopping early (weighted 0.1: two reward functions, so `reward_weights` matters)."""
    return [float(len(text.split()) < 3) for text in completions]


REWARD_WEIGHTS = [1.0, 0.1]
#: GRPOConfig fields the demo sets from its own options
OWN_OPTIONS = {"per_device_train_batch_size": "--episodes (with steps_per_generation)", "learning_rate": "lr=",
               "beta": "--kl-coef"}


def build_trainer(episodes: int = 32, kl_coef: float = 0.1, loss_type: str = "grpo", num_iterations: int = 1,
                  steps_per_generation: int = 2, gradient_accumulation_steps: int = 2, bf16: bool = False,
                  lr: float = 1e-3, temperature: float = 1.0, seed: int = 0, output_dir: str | None = None,
                  **config: Any):
    """A GRPOTrainer as a user would construct one, at these settings; ``config`` is any other
    GRPOConfig field (mask_truncated_completions, entropy_coef, scale_rewards, ...). The KL term's
    importance-ratio weighting (`use_bias_correction_kl`, on by default in TRL 1.16) is off unless
    asked for: rlbisect.check.spec.Objective cannot state it, and the demo's objective is declared exactly."""
    from trl import GRPOConfig, GRPOTrainer
    torch.set_num_threads(1)     # 2 threads made a step 30x slower on a 2-core machine
    fields = getattr(GRPOConfig, "__dataclass_fields__", {})
    unknown = sorted(set(config) - set(fields))
    if unknown:
        raise ValueError(f"GRPOConfig of this TRL has no field {unknown[0]!r}")
    for field, own in OWN_OPTIONS.items():
        if field in config:
            raise ValueError(f"GRPOConfig's {field} is the demo's {own}: give that instead")
    group = config.get("num_generations", GROUP)
    if episodes % (group * steps_per_generation):
        raise ValueError(f"episodes must be a multiple of num_generations ({group}) x steps_per_generation")
    # any other field given overrides the demo's own value (num_generations, max_completion_length...)
    fixed: dict[str, Any] = dict(
        output_dir=output_dir or _scratch(), report_to="none", use_cpu=True, num_generations=GROUP,
        max_completion_length=MAX_NEW, logging_steps=1, save_strategy="no", dataloader_num_workers=0,
        disable_tqdm=True, reward_weights=REWARD_WEIGHTS,
        **({"importance_sampling_level": "sequence"} if loss_type == "luspo" else {}),
        **({"use_bias_correction_kl": False} if "use_bias_correction_kl" in fields else {}))
    args = GRPOConfig(
        bf16=bf16, per_device_train_batch_size=episodes // steps_per_generation,
        steps_per_generation=steps_per_generation, gradient_accumulation_steps=gradient_accumulation_steps,
        num_iterations=num_iterations, learning_rate=lr, beta=kl_coef or 0.0,
        loss_type=loss_type, temperature=temperature, seed=seed, **{**fixed, **config})
    rewards: list[Any] = [answer_reward, brevity_reward]   # TRL's RewardFunc returns list[float | None]
    # the policy as a fresh copy of the one loaded once per process (TRL loads its reference by name)
    with _reference_loads_remembered():
        return GRPOTrainer(model=copy.deepcopy(_loaded(str(_model_dir(seed)))), reward_funcs=rewards, args=args,
                           train_dataset=_dataset(), processing_class=_tokenizer())


_LOADS: dict = {}    # (the loader's arguments, torch's default dtype) -> an untouched copy of what it returned


@contextlib.contextmanager
def _reference_loads_remembered():
    """TRL's reference-model loader (`create_model_from_path`, called by GRPOTrainer.__init__) made
    to run once per process per set of arguments: a later call with the same ones gets a deep copy
    of what the first returned. Loading is three quarters of building this demo's trainer, and the
    checks build six; the loader is a pure function of its arguments and the files on disk (it
    draws no random numbers: tests/frameworks/trl/test_tiny.py), and everything GRPOTrainer does
    with what it returns still runs in every build. A TRL without the function loads as it always did."""
    import trl.trainer.grpo_trainer as grpo
    load = getattr(grpo, "create_model_from_path", None)
    if load is None:
        yield
        return

    def remembered(*args, **kwargs):
        key = repr((args, sorted(kwargs.items()), torch.get_default_dtype()))
        if key not in _LOADS:
            model = load(*args, **kwargs)
            _LOADS[key] = copy.deepcopy(model)
            return model
        return copy.deepcopy(_LOADS[key])
    grpo.create_model_from_path = remembered
    try:
        yield
    finally:
        grpo.create_model_from_path = load


@functools.lru_cache(maxsize=1)
def _scratch() -> str:
    """One output folder per process for every trainer it builds (they save nothing there: no
    checkpoints, no reports), removed when the process ends: a folder per trainer piled up."""
    path = tempfile.mkdtemp(prefix="rlbisect-trl-")
    atexit.register(shutil.rmtree, path, True)
    return path


@functools.lru_cache(maxsize=4)
def _loaded(path: str):
    """The tiny policy loaded from disk once per process: never handed to a trainer itself."""
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path)


def inject(trainer, bug: str | None) -> None:
    """Switch one fault on in this trainer instance (TRL's code elsewhere untouched)."""
    if bug is None:
        return
    if bug not in FAULTS:
        raise ValueError(f"unknown bug {bug!r} (faults: {', '.join(FAULTS)})")
    if bug in ("mask_shift", "adv_sign", "old_logp_absent", "eos_unmasked", "items_count_truncated"):
        score = trainer._generate_and_score_completions

        def faulty_score(inputs):
            out = score(inputs)
            if bug == "mask_shift":
                m = out["completion_mask"]
                out["completion_mask"] = torch.cat([torch.zeros_like(m[:, :1]), m[:, :-1]], 1)
            elif bug == "eos_unmasked":
                # EOS treated like padding when the mask is built (torchtune#949, RAGEN#59: the
                # model is never trained to stop)
                from rlbisect.frameworks.trl._internals import eos_ids
                eos = torch.tensor(eos_ids(trainer))
                out["completion_mask"] = out["completion_mask"] * ~torch.isin(out["completion_ids"], eos)
            elif bug == "items_count_truncated":
                # counted from the mask before the truncated completions are dropped
                # (huggingface/trl#6369, fixed by #6439): the loss is diluted by tokens it never trains on
                from rlbisect.frameworks.trl._internals import eos_ids
                ids = out["completion_ids"]
                is_eos = torch.isin(ids, torch.tensor(eos_ids(trainer)))
                last = torch.where(is_eos.any(1), is_eos.int().argmax(1), torch.full_like(is_eos[:, 0], ids.shape[1] - 1, dtype=torch.long))
                counted = (torch.arange(ids.shape[1])[None] <= last[:, None]).sum()
                out["num_items_in_batch"] = counted.to(out["num_items_in_batch"].dtype) \
                    if isinstance(out["num_items_in_batch"], torch.Tensor) else int(counted)
            elif bug == "adv_sign":
                out["advantages"] = -out["advantages"]
            else:
                out.pop("old_per_token_logps", None)
            return out
        trainer._generate_and_score_completions = faulty_score
    elif bug in ("old_logp_detached", "accum_unscaled", "adv_renorm"):
        compute = trainer.compute_loss

        def faulty_loss(model, inputs, return_outputs=False, num_items_in_batch=None):
            if bug == "old_logp_detached":
                inputs = {k: v for k, v in inputs.items() if k != "old_per_token_logps"}
            elif bug == "adv_renorm":
                # a second whitening over the micro-batch on top of GRPO's group normalization
                # (axon-rl/gem#113, amazon-science/reskill#12: "double normalization")
                a = inputs["advantages"]
                inputs = {**inputs, "advantages": (a - a.mean()) / (a.std() + 1e-4)}
            loss = compute(model, inputs, return_outputs, num_items_in_batch)
            return loss * trainer.current_gradient_accumulation_steps if bug == "accum_unscaled" else loss
        trainer.compute_loss = faulty_loss
    elif bug == "ref_is_policy":
        trainer.ref_model = trainer.model
    elif bug == "ref_logp_untempered":
        # the shape of a construction bug: `add_fused_lm_head(self.ref_model)` without the
        # temperature the policy's head gets (TRL's RLOOTrainer passes it; a subclass may not)
        import trl.trainer.utils as trl_utils
        # TRL < 1.16 has no fused head: it divides the logits in _get_per_token_logps_and_entropies
        add_fused_lm_head: Any = getattr(trl_utils, "add_fused_lm_head", None)
        if add_fused_lm_head is not None and trainer.ref_model is not None:
            add_fused_lm_head(trainer.ref_model, temperature=1.0)
        elif add_fused_lm_head is None:
            logps = trainer._get_per_token_logps_and_entropies

            def untempered(model, *args, **kwargs):
                if model is not trainer.ref_model:
                    return logps(model, *args, **kwargs)
                saved, trainer.temperature = trainer.temperature, 1.0
                try:
                    return logps(model, *args, **kwargs)
                finally:
                    trainer.temperature = saved
            trainer._get_per_token_logps_and_entropies = untempered
    elif bug == "sampler_temp":
        trainer.generation_config.temperature = 0.7
    elif bug == "reward_misaligned":
        # each completion scored against the next prompt's answer: a column misaligned with the
        # completions on the way to the reward functions (cf. huggingface/trl#6533, a reward list
        # silently broadcast over the wrong completions)
        rewards = trainer._calculate_rewards

        def misaligned(inputs, prompts, completions, completion_ids_list):
            G = trainer.num_generations
            return rewards(inputs[G:] + inputs[:G], prompts, completions, completion_ids_list)
        trainer._calculate_rewards = misaligned
    elif bug == "reward_weight_ignored":
        # the advantages formed from an unweighted sum of the reward functions (the shape of
        # huggingface/trl#5352, where TRL's logged reward ignored reward_weights)
        trainer.reward_weights = torch.ones_like(trainer.reward_weights)
