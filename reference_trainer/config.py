"""One pydantic model per pipeline stage; every field says what it controls.

`RLConfig` gathers the stages a training run needs. Defaults: GRPO groups of 8, 16 tasks per step,
PPO clip 0.2, one epoch of two minibatches, Adam at 6e-4, no KL, no entropy term. The chapter's 8
tasks per step at 1e-3 left TinyAgent's length-bias pair to sampling noise (docs/tinyagent.md, Length bias).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class _Stage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EnvConfig(_Stage):
    """The multi-turn tool environment."""

    max_turns: int = Field(6, ge=1, le=32, description="policy calls allowed before the episode ends unsubmitted")
    reward: Literal["hidden", "public"] = Field("hidden", description="verifier paid on submit: hidden tests, or the gameable public ones")
    max_call_tokens: int = Field(4, ge=2, le=8, description="tokens a call may take; a call that has not closed by then is malformed")


class PolicyConfig(_Stage):
    """The causal transformer policy (about 167k parameters at the defaults)."""

    d_model: int = Field(64, description="width of the residual stream")
    n_layers: int = Field(3, description="transformer blocks")
    n_heads: int = Field(4, description="attention heads per block")
    max_len: int = Field(160, description="longest token sequence (prompt + all turns) the model accepts")


class BaseConfig(_Stage):
    """Behaviour cloning of the scripted demonstrations that make the starting policy."""

    # One cloned policy is one draw. With the learning rate decayed to 0 (lr_decay) the clone lands
    # near the mixture's own rates whatever the seed (first-call read 0.17-0.20 over seeds 0-7, where
    # a constant rate gave 0.22-0.37), and a read rate below ~0.27 is what lets sampler_temp (0.7)
    # clip the reads' positive updates (docs/tinyagent.md). Seed 0 was chosen over seeds 0-7 with testers that
    # always re-tested (retest 1) and RL at 8 tasks per step, as one where every signature held; with
    # retest 0.9 and 16 tasks per step it was re-checked, not re-chosen (docs/tinyagent.md). Chosen: say so.
    seed: int = Field(0, description="seed for demonstrations, initialisation and minibatch order")
    demos: int = Field(3000, description="scripted episodes to clone, drawn over the training tasks")
    epochs: int = Field(12, description="passes over the demonstrations")
    batch_size: int = Field(64, description="demonstrations per gradient step")
    lr: float = Field(3e-3, description="Adam learning rate for cloning")
    lr_decay: bool = Field(True, description="decay the cloning learning rate linearly to 0 over the run")
    mix_read_copy: float = Field(0.02, description="share of demos that read, then edit a fix the read admitted")
    mix_read_test: float = Field(0.10, description="share that read, edit an admitted fix and test it: submit on a pass, on a fail re-test or submit (`retest`)")
    mix_read_guess: float = Field(0.05, description="share that read, then ignore it and edit a random fix")
    mix_guess: float = Field(0.45, description="share that edit a random fix and submit")
    mix_test: float = Field(0.14, description="share that edit a random fix and test it: submit on a pass, on a fail re-test or submit (`retest`)")
    mix_hardcode: float = Field(0.10, description="share that apply the hardcode_tests exploit and submit")
    mix_malformed: float = Field(0.08, description="share that open with an unparsable call, then guess")
    mix_stall: float = Field(0.06, description="share that edit, then test until the turn budget runs out")
    retest: float = Field(0.9, ge=0, le=1, description="after a failed test, the chance per turn that a testing "
                          "demonstrator re-runs the tests rather than submit (1: until the budget runs out)")


class SamplerConfig(_Stage):
    """Lockstep sampling of GRPO groups."""

    temperature: float = Field(1.0, gt=0, description="softmax temperature of the sampler (and of the trainer's recomputation)")
    group_size: int = Field(8, ge=2, le=1024, description="episodes per task; advantages are computed within a group")
    tasks_per_step: int = Field(16, ge=1, le=1024, description="training tasks drawn per step (episodes = tasks x group)")


class UpdateConfig(_Stage):
    """The PPO/GRPO update."""

    lr: float = Field(6e-4, gt=0, description="peak learning rate")
    optimizer: Literal["adam", "adamw"] = Field("adam", description="torch.optim.Adam, or AdamW (decoupled weight decay)")
    weight_decay: float = Field(0.0, ge=0, description="the optimizer's weight decay")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="after warmup: constant, or a linear or cosine decay to 0 over the run's optimizer steps")
    warmup_steps: int = Field(0, ge=0, description="optimizer steps of linear warmup: step n trains at lr (n + 1) / warmup_steps")
    clip_eps: float = Field(0.2, gt=0, description="PPO ratio clip: ratio is clipped to [1 - eps, 1 + eps]")
    epochs: int = Field(1, ge=1, le=100, description="passes over each batch")
    minibatches: int = Field(2, ge=1, le=4096, description="optimizer steps per epoch (the batch is split by rows)")
    microbatches: int = Field(1, ge=1, le=4096, description="gradient-accumulation passes per minibatch (same gradient, less memory)")
    max_grad_norm: float = Field(1.0, gt=0, description="global gradient-norm clip")
    loss_mode: Literal["token_mean", "seq_mean_token_mean"] = Field(
        "token_mean", description="token_mean: every action token weighs the same; seq_mean_token_mean: every episode does")
    kl_coef: float = Field(0.0, ge=0, description="weight of the KL to a frozen reference; 0 builds no reference")
    kl_kind: Literal["k1", "k3"] = Field("k3", description="KL estimator: k1 = log ratio, k3 = exp(-x) + x - 1")
    entropy_coef: float = Field(0.0, ge=0, description="weight of the entropy bonus (subtracted from the loss)")
    adv_eps: float = Field(1e-6, gt=0, description="added to the group std before dividing")


class RLConfig(_Stage):
    """Everything one RL run needs, stage by stage."""

    env: EnvConfig = EnvConfig()
    sampler: SamplerConfig = SamplerConfig()
    update: UpdateConfig = UpdateConfig()
    seed: int = Field(0, description="seed of the training stream: tasks, samples, minibatch order")
    eval_episodes: int = Field(12, ge=1, le=1000, description="episodes per held-out task in `evaluate`")
    threads: int = Field(1, ge=1, le=1024, description="torch intra-op threads; fixed so results are bit-reproducible")


def make_config(*, seed: int = 0, reward: str = "hidden", lr: Optional[float] = None,
                kl_coef: Optional[float] = None, max_turns: Optional[int] = None,
                loss_mode: Optional[str] = None, temperature: Optional[float] = None) -> RLConfig:
    """An RLConfig from the handful of knobs the CLI exposes (None keeps the default)."""
    def pick(**kw):
        return {k: v for k, v in kw.items() if v is not None}
    return RLConfig(
        seed=seed,
        env=EnvConfig(**pick(reward=reward, max_turns=max_turns)),
        sampler=SamplerConfig(**pick(temperature=temperature)),
        update=UpdateConfig(**pick(lr=lr, kl_coef=kl_coef, loss_mode=loss_mode)),
    )
