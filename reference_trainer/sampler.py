"""Batched lockstep sampling with a KV cache.

All episodes advance one position at a time. At each position a row either takes the next token
the prompt or the environment has queued (a *forced* token, owner prompt/env) or samples one from
the policy (owner policy). A policy call ends at `<end>` or after `max_call_tokens`; the environment
then answers, and its reply is queued. Every token gets an owner and, if sampled, the log-probability
the sampler gave it at its temperature (0 elsewhere), which is what the trainer is checked against.
"""

from __future__ import annotations

import torch

from .config import EnvConfig, SamplerConfig
from .env import OWNER, Env, Trajectory
from .faults import SAMPLER_TOP_K
from .tasks import Task, passes
from .tokenizer import Tokenizer

__all__ = ["OWNER", "Trajectory", "sample_episodes", "sample_groups"]


@torch.no_grad()
def sample_episodes(model, tasks: list[Task], tok: Tokenizer, env_cfg: EnvConfig, temperature: float,
                    generator: torch.Generator, use_cache: bool = True, bug: str | None = None) -> list[Trajectory]:
    """One episode per entry of `tasks`, all sampled in lockstep."""
    envs = [Env(t, tok, env_cfg, bug) for t in tasks]
    B = len(envs)
    queued = [env.reset() for env in envs]                      # forced tokens waiting, per row
    queued_owner = [OWNER["prompt"]] * B
    call: list[list[int]] = [[] for _ in range(B)]              # the policy call in progress
    trajs = [Trajectory([], [], [], env.info) for env in envs]
    cache, logits, pos = None, None, 0
    while not all(env.done for env in envs):
        next_ids = torch.full((B,), tok.pad_id, dtype=torch.long)
        sampled = [i for i in range(B) if not envs[i].done and not queued[i]]
        sampled_set = set(sampled)
        if sampled:
            logp_all = torch.log_softmax(logits[sampled] / temperature, dim=-1)   # [b, V]
            if bug == "sampler_top_k":   # engine-side top-k, its processed log-probs recorded (modelscope/ms-swift#8442)
                kth = logp_all.topk(SAMPLER_TOP_K, dim=-1).values[:, -1:]
                logp_all = logp_all.masked_fill(logp_all < kth, float("-inf")).log_softmax(-1)
            picks = torch.multinomial(logp_all.exp(), 1, generator=generator)[:, 0]
            picked_logp = logp_all.gather(-1, picks[:, None])[:, 0]
        for j, i in enumerate(sampled):
            token = int(picks[j])
            next_ids[i] = token
            stop = bug == "stop_token_unowned" and token == tok.end_id   # stop string stripped, re-added (rasbt/reasoning-from-scratch#185)
            trajs[i].ids.append(token), trajs[i].owner.append(OWNER["env" if stop else "policy"])
            trajs[i].sample_logp.append(float(picked_logp[j]))
            trajs[i].drawn += 1
            call[i].append(token)
            if token == tok.end_id or len(call[i]) >= env_cfg.max_call_tokens:
                queued[i], queued_owner[i] = envs[i].step(call[i]), OWNER["env"]
                call[i] = []
        for i in range(B):
            if i in sampled_set or not queued[i]:
                continue
            token = queued[i].pop(0)
            next_ids[i] = token
            trajs[i].ids.append(token), trajs[i].owner.append(queued_owner[i])
            trajs[i].sample_logp.append(0.0)
        if all(env.done for env in envs) and not any(queued):
            break
        if use_cache:
            logits, cache = model.step(next_ids, pos, cache)
        else:                                                   # the slow path, for the benchmark
            window = torch.tensor([t.ids + [tok.pad_id] * (pos + 1 - len(t.ids)) for t in trajs])
            logits = model(window)[:, -1]
        pos += 1
    if bug == "unsubmitted_rewarded":   # truncated episodes scored anyway (huggingface/trl#3248, Tencent-Hunyuan/UniRL#19)
        for env in envs:
            if not env.info.submitted:
                env.info.reward = float(passes(env.code, env.task.public))
    return trajs


def sample_groups(model, tasks: list[Task], tok: Tokenizer, env_cfg: EnvConfig, sampler_cfg: SamplerConfig,
                  generator: torch.Generator, temperature: float | None = None,
                  bug: str | None = None) -> list[Trajectory]:
    """`group_size` episodes of each task, laid out group by group: [task0 x G, task1 x G, ...]."""
    episodes = [t for t in tasks for _ in range(sampler_cfg.group_size)]
    if bug == "group_tiled":   # tasks tiled, not repeated in place: a group mixes tasks (StarsfieldAI/R1-V#67)
        episodes = [t for _ in range(sampler_cfg.group_size) for t in tasks]
    temp = sampler_cfg.temperature if temperature is None else temperature
    if bug == "env_cfg_ignored":   # a default beats the configured one (mozilla-ai/any-agent#732)
        env_cfg = EnvConfig()
    return sample_episodes(model, episodes, tok, env_cfg, temp, generator, bug=bug)
