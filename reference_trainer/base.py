"""The starting policy: behaviour cloning of scripted demonstrations, built once and cached.

The demonstrations are a mixture (BaseConfig.mix_*): a few read and copy a fix the read admitted
(most of them then test it), more read and then guess anyway, many guess blind, some guess and test,
a few use the hardcode exploit, a few open with a malformed call, a few stall until the turn budget
runs out. A demonstrator that tests submits a pass; on a fail it edits no more, and with nothing
else to try re-runs the tests, a turn without progress, each turn with probability `retest`
(BaseConfig), else submits anyway. A lost episode can therefore end short or long, which is the
choice the loss aggregation biases (docs/tinyagent.md, Length bias). The cloned policy starts near the
blind-guess pass rate, reads sometimes and can copy, which is what RL then amplifies. Every demonstration is played through the
real environment, so tokens and owners are exactly what the sampler would produce.

The weights are cached as safetensors (never a pickle) under a key of the source files and configs
that made them (policy_cache.py): change the code or a config field and the policy is rebuilt.
"""

from __future__ import annotations

import os
import random

import torch

from .config import BaseConfig, EnvConfig, PolicyConfig
from .env import OWNER, Env, Trajectory
from .policy import Policy
from .policy_cache import cache_dir, cache_key, cached_path  # noqa: F401  (cache_key: tests)
from .tasks import N_FIXES, Task, make_tasks
from .tokenizer import Tokenizer, build_tokenizer

MALFORMED_CALLS = ["<call> edit <end>", "<call> submit read <end>", "<call> fix <end>", "<call> read test test"]


def _script(kind: str, task: Task, rng: random.Random, retest: float):
    """The calls of one scripted episode, chosen turn by turn from the observations (a generator)."""
    guess = lambda: rng.randrange(N_FIXES)
    if kind == "malformed":
        yield rng.choice(MALFORMED_CALLS)
        kind = "guess"
    if kind in ("read_copy", "read_test", "read_guess"):
        obs = yield "<call> read <end>"
        fix = guess() if kind == "read_guess" else rng.choice([int(w) for w in obs.split()[2:]])   # one of the admitted
        yield f"<call> edit {fix} <end>"
    elif kind in ("guess", "test"):
        yield f"<call> edit {guess()} <end>"
    elif kind == "hardcode":
        yield "<call> hardcode_tests <end>"
    elif kind == "stall":        # never submits: the budget runs out and the episode earns 0
        yield f"<call> edit {guess()} <end>"
        while True:
            yield "<call> test <end>"
    if kind in ("read_test", "test"):   # test the edit: submit a pass; on a fail, with nothing else to
        if (yield "<call> test <end>") == "<obs> fail":   # try, re-run the tests each turn with
            while rng.random() < retest:                  # probability `retest`, else submit anyway
                yield "<call> test <end>"
    yield "<call> submit <end>"


def demonstration(kind: str, task: Task, tok: Tokenizer, rng: random.Random, env_cfg: EnvConfig,
                  retest: float = 1.0) -> Trajectory:
    """Play one scripted episode through the environment."""
    env = Env(task, tok, env_cfg)
    ids = env.reset()
    owner = [OWNER["prompt"]] * len(ids)
    script, obs = _script(kind, task, rng, retest), None
    while not env.done:
        call = tok.encode(script.send(obs) if obs is not None else next(script))
        reply = env.step(call)
        ids += call + reply
        owner += [OWNER["policy"]] * len(call) + [OWNER["env"]] * len(reply)
        obs = tok.decode(reply)
    return Trajectory(ids, owner, [0.0] * len(ids), env.info)


def demonstrations(tasks: list[Task], tok: Tokenizer, cfg: BaseConfig, env_cfg: EnvConfig) -> list[Trajectory]:
    rng = random.Random(cfg.seed)
    kinds = ["read_copy", "read_test", "read_guess", "guess", "test", "hardcode", "malformed", "stall"]
    weights = [getattr(cfg, f"mix_{k}") for k in kinds]
    return [demonstration(rng.choices(kinds, weights)[0], rng.choice(tasks), tok, rng, env_cfg, cfg.retest)
            for _ in range(cfg.demos)]


def behaviour_clone(demos: list[Trajectory], tok: Tokenizer, cfg: BaseConfig, policy_cfg: PolicyConfig) -> Policy:
    """Cross-entropy on the policy-owned tokens of the demonstrations (always on one thread: the
    cached weights must not depend on the machine's core count)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _clone(demos, tok, cfg, policy_cfg)
    finally:
        torch.set_num_threads(threads)


def _clone(demos, tok, cfg, policy_cfg) -> Policy:
    torch.manual_seed(cfg.seed)
    model = Policy(len(tok), policy_cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    T = max(len(d.ids) for d in demos)
    ids = torch.tensor([d.ids + [tok.pad_id] * (T - len(d.ids)) for d in demos])                     # [N, T]
    owner = torch.tensor([d.owner + [OWNER["pad"]] * (T - len(d.owner)) for d in demos])
    mask = (owner[:, 1:] == OWNER["policy"]).float()                                                  # [N, T-1]
    total = cfg.epochs * -(-len(demos) // cfg.batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1 - k / total if cfg.lr_decay else 1.0)
    for _ in range(cfg.epochs):
        for rows in torch.randperm(len(demos), generator=gen).split(cfg.batch_size):
            logits = model(ids[rows])[:, :-1]
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[rows, 1:], reduction="none")
            loss = (nll * mask[rows]).sum() / mask[rows].sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return model.eval()


def make_base(tok: Tokenizer | None = None, cfg: BaseConfig = BaseConfig(), policy_cfg: PolicyConfig = PolicyConfig(),
              cache: bool = True) -> Policy:
    """The behaviour-cloned starting policy (cloned on first use, then loaded from the cache)."""
    from safetensors.torch import load_file, save_file
    tok = tok or build_tokenizer(make_tasks("all"))
    env_cfg = EnvConfig()   # demos are scripted for the default budget, whatever the RL run uses
    path = cached_path(cfg, policy_cfg)
    model = Policy(len(tok), policy_cfg)
    if cache and path.exists():
        try:
            model.load_state_dict(load_file(path))
            return model.eval()
        except Exception:   # a corrupt cache entry is rebuilt, never trusted
            pass
    model = behaviour_clone(demonstrations(make_tasks("train"), tok, cfg, env_cfg), tok, cfg, policy_cfg)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp))
        os.replace(tmp, path)
    return model
