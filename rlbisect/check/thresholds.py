"""Pass/fail limits of the invariants: fp32 defaults and a starting point for bf16 engines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# A NaN limit compares false both ways and a negative one lets "must exceed" checks pass on 0:
# either would turn a check off without saying so, so a limit is finite and >= 0
Limit = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Thresholds(BaseModel):
    """Pass/fail limits. The defaults are for an fp32 sampler and trainer (the chapter's)."""

    model_config = ConfigDict(extra="forbid")

    logp_gap: Limit = Field(1e-4, description="max sampler-vs-trainer |logp| difference on trained tokens")
    ratio: Limit = Field(1e-4, description="max |ratio - 1| before any optimizer step")
    group_mean: Limit = Field(1e-5, description="max |mean advantage| of a group")
    padding: Limit = Field(1e-5, description="max |loss change| and relative gradient change from 8 extra pad positions")
    accumulation: Limit = Field(1e-4, description="max relative error of the accumulated gradient")
    approx_kl: Limit = Field(1e-8, description="approx_kl over one update must exceed this (a stale old_logp gives "
                                                "exactly 0 or float noise; a real update moves it by >1e-5)")
    correlation: Limit = Field(0.0, description="corr(change of log pi, advantage) must exceed this")
    kl_ref: Limit = Field(0.0, description="KL to the reference after one update must exceed this")
    clip_leak: Limit = Field(1e-6, description="max advantage-term gradient, relative to the minibatch's, "
                                               "where the ratio is outside the clip range")
    group_local: Limit = Field(1e-6, description="max change of another group's advantage when one group's rewards change")
    kl_pull: Limit = Field(0.0, description="relative KL decrease along the KL term's gradient must exceed this")
    consumed: Limit = Field(1e-6, description="max difference between what the update's loss consumes "
                                              "(mask, old log-probs, advantages) and what prepare() returns")
    objective: Limit = Field(1e-4, description="max relative error of the loss, in value and in gradient, "
                                               "against the declared objective of what it consumed")
    lr: Limit = Field(1e-6, description="max relative error of the learning rate against the declared schedule")
    grad_clip: Limit = Field(1e-3, description="max relative excess of the gradient norm an optimizer step "
                                               "applies over max_grad_norm")

    @classmethod
    def bf16(cls) -> "Thresholds":
        """Starting points for a bf16 inference engine against a bf16/fp32 trainer, where per-token
        mismatch of a few hundredths of a nat is normal. Calibrate them: run the checks on a known-good
        commit several times and set each limit a few times above the largest value you measure."""
        return cls(logp_gap=0.5, ratio=0.5, group_mean=1e-3, padding=1e-2, accumulation=2e-2, consumed=1e-2,
                   objective=2e-2)

    @classmethod
    def named(cls, spec: str | None) -> "Thresholds":
        """``fp32`` (the defaults), ``bf16`` or a JSON file of field values (``--thresholds``); an
        unknown key or a file that is not JSON is an input error, never silently ignored."""
        import json
        from rlbisect.errors import InputError
        if spec in (None, "fp32"):
            return cls()
        if spec == "bf16":
            return cls.bf16()
        path = Path(spec)
        if not path.is_file():
            raise InputError(f"--thresholds {spec}: expected fp32, bf16 or a JSON file of limits")
        try:
            return cls(**json.loads(path.read_text()))
        except (ValueError, TypeError) as e:
            first = e.errors()[0] if isinstance(e, ValidationError) else None
            why = (f"unknown key {first['loc'][0]!r} (keys: {', '.join(cls.model_fields)})"
                   if first and first["type"] == "extra_forbidden" else
                   f"{first['loc'][0]}: {first['msg']}" if first else f"not a JSON object of limits ({e})")
            raise InputError(f"--thresholds {spec}: {why}".splitlines()[0]) from None
