"""``BisectOptions``: how ``rlbisect run`` searches, in one documented model.

The CLI builds it once from its flags; the Python API takes it as is::

    from rlbisect.bisect import BisectOptions, bisect, make_predicate
    result = bisect("path/to/repo", "v1.0..main", make_predicate(command=["make", "test"]),
                    BisectOptions(jobs=4, timeout=600))

What a predicate measures has its own model beside it (``--predicate NAME``'s options, see
:mod:`rlbisect.bisect.predicates`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class BisectOptions(BaseModel):
    """Every knob of the search; the defaults are a plain ``git bisect run``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    first_parent: bool = Field(False, description="follow only the first parent of merges "
                               "(git bisect --first-parent)")
    timeout: float | None = Field(None, gt=0, description="seconds per probe; a probe that runs "
                                  "longer is killed and skipped, never bad")
    use_cache: bool = Field(True, description="reuse and record verdicts in .git/rlbisect/cache.jsonl")
    confirm_endpoints: bool = Field(False, description="probe GOOD and BAD before searching "
                                    "(otherwise only when the answer rests on one of them)")
    diagnose: bool | None = Field(None, description="after a find, show what moved between the "
                                  "first bad commit and its parent, probing the parent if the bisect "
                                  "did not (default: on, but not with --flaky: one run of a noisy "
                                  "predicate would mislead)")
    verify: int | None = Field(None, ge=0, description="before answering, run the first bad commit and "
                               "its parent this many more times each; any run that disagrees ends "
                               "with no culprit, exit 3 (default: 3 when the median probe took under "
                               "1 s, 1 under 10 s, else 0)")
    jobs: int = Field(1, ge=1, description="commits probed at once, each in its own checkout "
                      "(k-ary search: about log_(J+1) N rounds)")
    executor: Literal["local", "ray"] = Field("local", description="where probes run: this "
                                              "machine, or one Ray task per probe")
    ray_address: str | None = Field(None, description="--executor ray: the cluster (default "
                                    "RAY_ADDRESS, else a local instance)")
    ray_gpus: float = Field(0.0, ge=0, description="--executor ray: GPUs each probe task asks for")
    clone_url: str | None = Field(None, description="--executor ray: nodes clone this URL instead "
                                  "of reading the repository over a shared filesystem")
    flaky: bool = Field(False, description="the predicate can lie: keep a posterior over the "
                        "culprit and repeat runs where they inform most (with --predicate short-run "
                        "--metric M: one run per probe, its value pooled across commits, seeds paired across "
                        "commits so a deterministic trainer's repeats count)")
    per_commit: bool = Field(False, description="short runs with --metric, without --flaky: keep judging "
                             "each commit against GOOD when a good verdict's runs did not repeat GOOD's on "
                             "the same seeds (by default the search then switches to the measured one, as "
                             "with --flaky: such verdicts are only tests at the seed spread)")
    confidence: float | None = Field(None, gt=0.5, lt=1, description="--flaky: how sure an "
                                     "answer must be (default 0.95); 0.99 names a wrong commit "
                                     "several times less often when a failure rate only rises, "
                                     "for 3-4 more runs on a nearly clean predicate (docs/noisy.md: "
                                     "choosing --confidence)")
    max_runs: int | None = Field(None, ge=1, description="--flaky: predicate runs at most "
                                 "(default: 60 per halving of the range, at least 120)")
    min_effect: float | None = Field(None, gt=0, description="--flaky on short runs with --metric and "
                                     "--direction lower|higher: the smallest move of the metric worth "
                                     "naming, in seed spreads; when none that large happened anywhere in "
                                     "the range the answer is 'nothing changed' (exit 5) instead of the "
                                     "budget spent (exit 3)")
    terms: tuple[str, str] | None = Field(None, description="find the first commit where the predicate "
                                          "starts passing (a fix): GOOD..BAD is OLD..NEW, failing at OLD "
                                          "and passing at NEW, named by these two words (git bisect's "
                                          "--term-old/--term-new; --find-fix: broken,fixed)")

    @model_validator(mode="after")
    def _consistent(self) -> "BisectOptions":
        if self.terms is not None:
            old, new = self.terms
            if not all(t and t.replace("-", "").replace("_", "").isalnum() for t in self.terms) or old == new:
                raise ValueError(f"--terms {old},{new}: give two different words (letters, digits, - and _), "
                                 "e.g. --terms broken,fixed")
        if self.flaky and self.per_commit:
            raise ValueError("--per-commit keeps the per-commit judgement; --flaky is the measured search")
        if self.flaky and (self.verify or self.confirm_endpoints):
            raise ValueError(f"--{'verify' if self.verify else 'confirm-endpoints'} is for a deterministic predicate; "
                             "--flaky runs GOOD and BAD, and repeats runs, itself")
        if not self.flaky:
            for name in ("confidence", "max_runs", "min_effect"):
                if getattr(self, name) is not None:
                    raise ValueError(f"--{name.replace('_', '-')} needs --flaky")
        elif self.diagnose:
            raise ValueError("--flaky cannot diagnose: one run of a noisy predicate would mislead")
        if self.executor == "local":
            given = [f for f in ("ray_address", "ray_gpus", "clone_url") if getattr(self, f)]
            if given:
                raise ValueError(f"--{given[0].replace('_', '-')} needs --executor ray")
        return self
