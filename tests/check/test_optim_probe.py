"""Spent gradients poisoned: a step that reads the previous step's gradient is counted, in every
place a correct loop may clear gradients, and a correct loop's numbers do not change."""

import pytest
import torch

from rlbisect.check.optim_probe import spent_gradients_poisoned


def loop(zero: str, steps: int = 3, clip: bool = True) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    x = torch.randn(steps, 8, 4)
    for i in range(steps):
        if zero == "before":
            opt.zero_grad()
        elif zero == "before, in place":
            opt.zero_grad(set_to_none=False)
        model(x[i]).pow(2).mean().backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        if zero == "after":
            opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("zero", ["before", "before, in place", "after"])
def test_a_loop_that_clears_gradients_passes_with_the_same_numbers(zero):
    clean = loop(zero)
    with spent_gradients_poisoned() as leaks:
        watched = loop(zero)
    assert leaks.steps == 3 and leaks.leaked == 0 and torch.equal(clean, watched)


@pytest.mark.parametrize("clip", [True, False])
def test_a_forgotten_zero_grad_is_counted_at_every_later_step(clip):
    with spent_gradients_poisoned() as leaks:
        loop("never", clip=clip)
    assert leaks.steps == 3 and leaks.leaked == 2


def test_the_hooks_are_gone_after_the_block():
    with spent_gradients_poisoned():
        pass
    assert torch.isfinite(loop("never")).all()
