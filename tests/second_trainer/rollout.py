"""A second RL trainer, part 1: the task, the policy and the sampler. Written independently of
TinyAgent (reference_trainer) to show rlbisect's invariants are not tied to one trainer.

Task "add two digits". The prompt is  BOS a + b =  ; the policy then writes the decimal answer one
digit per turn and closes it with END, within MAX_TURNS policy turns. After every policy digit the
environment takes a turn and appends SEP, so owners interleave:

    BOS a + b = d1 SEP d2 SEP END        (actors: env x5, policy, env, policy, env, policy)

Reward 1 when the policy's tokens are exactly the digits of a + b followed by END, else 0.

Policy: embedding -> GRU cell -> linear head, run one token at a time. A learned initial state `h0`
predicts the first token. A column whose `live` flag is off (padding) leaves the state unchanged,
so left padding is exactly invisible to every real position.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

PLUS, EQ, END, SEP, PAD, BOS = 10, 11, 12, 13, 14, 15     # 0..9 are the digits
VOCAB = 16
ENV, POLICY, PADDING = 0, 1, -1                           # who wrote a token
MAX_TURNS = 3
PROMPTS = [(a, b) for a in range(10) for b in range(10)]


def prompt_tokens(a: int, b: int) -> list[int]:
    return [BOS, a, PLUS, b, EQ]


def answer_tokens(a: int, b: int) -> list[int]:
    """What a perfect policy writes: the digits of a + b, then END."""
    return [int(c) for c in str(a + b)] + [END]


def reward(a: int, b: int, policy_tokens: list[int]) -> float:
    return float(policy_tokens == answer_tokens(a, b))


class GRUPolicy(nn.Module):
    def __init__(self, hidden: int = 32, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.embed = nn.Embedding(VOCAB, hidden)
            self.cell = nn.GRUCell(hidden, hidden)
            self.head = nn.Linear(hidden, VOCAB)
            self.h0 = nn.Parameter(0.1 * torch.randn(hidden))

    def initial(self, n: int) -> torch.Tensor:
        return self.h0.expand(n, -1)

    def step(self, h: torch.Tensor, tok: torch.Tensor, live: torch.Tensor | None = None) -> torch.Tensor:
        new = self.cell(self.embed(tok), h)
        return new if live is None else torch.where(live[:, None], new, h)

    def forward(self, tokens: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        """[B, T] tokens -> [B, T, V] logits; column t scores tokens[:, t] given tokens[:, :t]
        (position-aligned, not shifted). Dead (padding) columns do not advance the state."""
        h, out = self.initial(tokens.shape[0]), []
        for t in range(tokens.shape[1]):
            out.append(self.head(h))
            h = self.step(h, tokens[:, t], live[:, t])
        return torch.stack(out, 1)


@dataclass
class Episode:
    """The sampler's record: every token, who wrote it, and the log-prob the sampler drew it with."""

    a: int
    b: int
    tokens: list[int] = field(default_factory=list)
    actors: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    reward: float = 0.0

    def add(self, tok: int, actor: int, logp: float = 0.0) -> None:
        self.tokens.append(tok)
        self.actors.append(actor)
        self.logps.append(logp)


@torch.no_grad()
def sample_groups(policy: GRUPolicy, prompts: list[tuple[int, int]], group_size: int,
                  gen: torch.Generator, temperature: float = 1.0) -> list[Episode]:
    """`group_size` episodes per prompt, rows grouped [p0 x G, p1 x G, ...], all run in lockstep
    with an incremental state (the sampler never calls the trainer's full-sequence forward)."""
    eps = [Episode(a, b) for a, b in prompts for _ in range(group_size)]
    n = len(eps)
    h = policy.initial(n)
    for e in eps:
        for tok in prompt_tokens(e.a, e.b):
            e.add(tok, ENV)
    for t in range(len(eps[0].tokens)):
        h = policy.step(h, torch.tensor([e.tokens[t] for e in eps]))
    alive = torch.ones(n, dtype=torch.bool)
    for turn in range(MAX_TURNS):
        logp = torch.log_softmax(policy.head(h) / temperature, -1)
        tok = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(1)
        chosen = logp.gather(1, tok[:, None]).squeeze(1)
        for i in alive.nonzero().flatten().tolist():
            eps[i].add(int(tok[i]), POLICY, float(chosen[i]))
        h = policy.step(h, tok, alive)
        alive = alive & (tok != END)
        if turn == MAX_TURNS - 1 or not alive.any():
            break
        for i in alive.nonzero().flatten().tolist():      # the environment's turn
            eps[i].add(SEP, ENV)
        h = policy.step(h, torch.full((n,), SEP), alive)
    for e in eps:
        e.reward = reward(e.a, e.b, [t for t, w in zip(e.tokens, e.actors) if w == POLICY])
    return eps
