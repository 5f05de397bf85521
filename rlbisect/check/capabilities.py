"""What an adapter's trainer can be asked: sampler log-probs, update shape, by-design gaps.

A real trainer is not TinyAgent: TRL keeps no sampler log-probs unless it generates with vLLM,
takes one optimizer step per generation batch by default (so there is no old log-prob to freeze),
and some of its loss types normalize per microbatch on purpose. An adapter says so with a
``capabilities`` attribute (a :class:`Capabilities` or a dict of its fields); the checks that
cannot apply then say n/a with the reason, and a declared by-design difference is shown with its
explanation instead of as a plain failure. An adapter that says nothing gets the defaults, which
are TinyAgent's: everything available, several optimizer steps per batch, nothing by design.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class Capabilities:
    sampler_logp: bool = True           # Truth.sample_logp holds the sampler's own log-probs
    one_step_per_batch: bool = False    # one optimizer step per sampled batch: old log-prob == current
    # check name -> why this trainer fails it on purpose (shown with the value, never hidden)
    by_design: dict[str, str] = field(default_factory=dict)


def capabilities_of(adapter) -> Capabilities:
    """The adapter's declared capabilities, defaults for what it does not declare."""
    declared = getattr(adapter, "capabilities", None)
    if declared is None:
        return Capabilities()
    if isinstance(declared, Capabilities):
        return declared
    if isinstance(declared, dict):
        known = {f.name for f in fields(Capabilities)}
        unknown = set(declared) - known
        if unknown:
            raise ValueError(f"unknown capability {sorted(unknown)[0]!r} (known: {', '.join(sorted(known))})")
        return Capabilities(**declared)
    raise TypeError(f"{type(adapter).__name__}.capabilities must be a Capabilities or a dict")
