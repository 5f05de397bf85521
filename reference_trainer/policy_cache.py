"""Where TinyAgent's starting policy is cached and under which key, without importing torch (so
a caller can ask whether it is built, cheaply).

The key hashes the source files the cloned weights depend on (and nothing else, so that a change to
the trainer, the sampler or the batching reuses the cached policy), the configs' JSON dumps, and
torch's release (the numerics of cloning may differ between releases).
"""

from __future__ import annotations

import hashlib
import os
from importlib import metadata
from pathlib import Path

from .config import BaseConfig, EnvConfig, PolicyConfig

#: The modules the weights depend on: keep in step with base.py's imports.
SOURCES = ("tasks.py", "tokenizer.py", "env.py", "policy.py", "base.py")


def _torch_release() -> str:
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:   # a source build without metadata
        import torch
        version = torch.__version__
    return version.split("+")[0]


def cache_key(cfg: BaseConfig, policy_cfg: PolicyConfig, env_cfg: EnvConfig) -> str:
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((here / name).read_bytes())
    for part in (cfg, policy_cfg, env_cfg):
        h.update(part.model_dump_json().encode())
    h.update(_torch_release().encode())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    """$RLBISECT_CACHE, else ~/.cache/rlbisect."""
    return Path(os.environ.get("RLBISECT_CACHE", Path.home() / ".cache" / "rlbisect"))


def cached_path(cfg: BaseConfig = BaseConfig(), policy_cfg: PolicyConfig = PolicyConfig()) -> Path:
    """Where the starting policy of these configs is cached (demos use the default env budget)."""
    return cache_dir() / f"base-{cache_key(cfg, policy_cfg, EnvConfig())}.safetensors"
