"""The demo's tiny GRPOTrainer: TRL's reference loader runs once per process per set of arguments."""

from __future__ import annotations

import contextlib
import warnings

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.slow     # transformers and TRL: tests/conftest.py

import torch  # noqa: E402

from rlbisect.frameworks.trl import tiny  # noqa: E402


def _state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)


def test_trls_reference_loader_draws_no_random_numbers():
    """What the memo rests on: the loader is a function of its arguments and the files (were a
    release to draw random numbers while loading, a remembered load would move the stream)."""
    from trl.trainer.utils import create_model_from_path
    path = str(tiny._model_dir(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = create_model_from_path(path)
        before = torch.get_rng_state().clone()
        again = create_model_from_path(path)
    assert torch.equal(before, torch.get_rng_state())
    assert _same(_state(first), _state(again))


def test_a_remembered_reference_is_what_trl_builds_and_is_each_trainers_own(monkeypatch):
    ids = torch.tensor([[2, 5, 6, 3]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tiny._LOADS.clear()
        first = tiny.build_trainer(seed=0, temperature=0.7)
        assert len(tiny._LOADS) == 1                  # TRL's own loader ran, and was remembered
        with torch.no_grad():                         # what a trainer does to its reference stays its own
            next(first.ref_model.parameters()).add_(1.0)
        second = tiny.build_trainer(seed=0, temperature=0.7)
        monkeypatch.setattr(tiny, "_reference_loads_remembered", contextlib.nullcontext)
        plain = tiny.build_trainer(seed=0, temperature=0.7)      # TRL loading its reference itself
        untempered = tiny.build_trainer(seed=0)
    ref = second.ref_model
    assert len(tiny._LOADS) == 1 and ref is not first.ref_model
    assert _same(_state(ref), _state(plain.ref_model))
    assert not _same(_state(ref), _state(first.ref_model))
    assert ref.training == plain.ref_model.training
    import trl.trainer.utils as trl_utils
    if hasattr(trl_utils, "add_fused_lm_head"):    # GRPOTrainer's handling ran alike: the head at its temperature
        with torch.no_grad():
            logp = [m(input_ids=ids, labels=ids, fused_lm_head=True).log_probs
                    for m in (ref, plain.ref_model, untempered.ref_model)]
        assert torch.equal(logp[0], logp[1]) and not torch.equal(logp[0], logp[2])   # (at 1.0 it differs)
    assert {id(p) for p in ref.parameters()}.isdisjoint(id(p) for p in second.model.parameters())
