"""rlbisect.check.copies: a copy of a policy whose forward was patched with a closure runs its own
weights (a plain deep copy runs the original's)."""

from __future__ import annotations

import copy
import types

import torch

from rlbisect.check.copies import clone


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x)


def _patched(model: torch.nn.Module) -> torch.nn.Module:
    """As TRL 1.16's fused head: the instance's forward closes over the original bound forward."""
    original_forward = model.forward
    scale = 2.0

    def forward(self, x, fused=False):
        return self.lin(x) * scale if fused else original_forward(x)
    model.forward = types.MethodType(forward, model)
    return model


def _moved(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    return model


X = torch.ones(4, 3)


def test_a_plain_deep_copy_of_a_patched_model_runs_the_originals_weights():
    """The hazard clone() exists for: the copy's unpatched path answers with the original."""
    torch.manual_seed(0)
    original = _patched(Net())
    moved = _moved(copy.deepcopy(original))
    assert torch.equal(moved(X), original(X))                       # the original's weights
    assert not torch.equal(moved(X, fused=True), original(X, fused=True))


def test_a_clone_runs_its_own_weights_on_every_path():
    torch.manual_seed(0)
    original = _patched(Net())
    before = original(X).detach().clone()
    moved = _moved(clone(original))
    assert torch.equal(moved(X), moved.lin(X))
    assert not torch.equal(moved(X), original(X))
    assert torch.equal(moved(X, fused=True), moved.lin(X) * 2.0)
    assert torch.equal(original(X), before)                         # the original is untouched
    assert all(a is not b for a, b in zip(moved.parameters(), original.parameters()))


def test_a_clone_of_an_unpatched_model_is_a_deep_copy():
    torch.manual_seed(0)
    original = torch.nn.Sequential(Net(), torch.nn.Tanh())
    copied = clone(original)
    assert "forward" not in vars(copied)
    assert torch.equal(copied(X), original(X))
    _moved(copied)
    assert not torch.equal(copied(X), original(X))


def test_a_patched_submodule_is_rebound_too():
    torch.manual_seed(0)
    outer = torch.nn.Sequential(_patched(Net()))
    moved = _moved(clone(outer))
    assert torch.equal(moved(X), moved[0].lin(X))
    assert not torch.equal(moved(X), outer(X))


def test_what_else_the_closure_holds_stays_shared_as_a_deep_copy_leaves_it():
    """Only methods bound to something the copy copied are rebound: a closure over an outside
    object (accelerate's autocast wrapper cannot even be copied) keeps that object."""
    class Outside:
        def scale(self):
            return 3.0
    outside = Outside()
    model = Net()
    original_forward, scale = model.forward, outside.scale

    def forward(self, x):
        return original_forward(x) * scale()
    model.forward = types.MethodType(forward, model)
    copied = clone(model)
    cells = {c.cell_contents.__self__ for c in copied.forward.__func__.__closure__}
    assert outside in cells and model not in cells and copied in cells
