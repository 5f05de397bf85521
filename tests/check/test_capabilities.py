"""Capabilities: a check an adapter's trainer cannot be asked is n/a with its reason; a declared
by-design failure is shown with its explanation (never as ok, never dropped)."""

from __future__ import annotations

import pytest

from rlbisect.check import Capabilities, load_adapter, sanity_checks
from rlbisect.check.capabilities import capabilities_of as capabilities


class _Declared:
    def __init__(self, inner, declared):
        self._inner, self.capabilities = inner, declared

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_declarations_as_dataclass_dict_or_nothing():
    assert capabilities(object()) == Capabilities()
    assert capabilities(_Declared(None, {"one_step_per_batch": True})).one_step_per_batch
    with pytest.raises(ValueError, match="unknown capability 'sampler_logps'"):
        capabilities(_Declared(None, {"sampler_logps": False}))


def test_na_and_by_design_on_a_real_trainer():
    declared = {"sampler_logp": False, "one_step_per_batch": True,
                "by_design": {"update raises log pi where A > 0": "this trainer descends on purpose"}}
    plain = sanity_checks(load_adapter("reference_trainer.adapter:make_adapter", bug="sign_flip"))
    got = sanity_checks(_Declared(load_adapter("reference_trainer.adapter:make_adapter", bug="sign_flip"), declared))
    name = "update raises log pi where A > 0"
    assert not plain[name].passed and not plain[name].by_design            # the fault fails check 8...
    assert got[name].passed and got[name].by_design == "this trainer descends on purpose"   # ...declared
    assert got[name].value == plain[name].value                            # the value is still shown
    assert "no log-probs" in got["sampler = trainer log-prob"].na
    assert "one optimizer step per sampled batch" in got["old_logp frozen in the update"].na
    assert plain["old_logp frozen in the update"].passed and not plain["old_logp frozen in the update"].na
