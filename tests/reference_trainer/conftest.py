import pytest
import torch

from reference_trainer.base import make_base
from reference_trainer.config import RLConfig
from reference_trainer.sampler import sample_groups
from reference_trainer.tasks import make_tasks
from reference_trainer.tokenizer import build_tokenizer


@pytest.fixture(scope="session")
def tok():
    return build_tokenizer(make_tasks("all"))


@pytest.fixture(scope="session")
def base(tok):
    torch.set_num_threads(1)
    return make_base(tok)


@pytest.fixture(scope="session")
def probe_trajs(base, tok):
    """64 episodes of the starting policy on 8 training tasks (the invariants' probe batch)."""
    cfg = RLConfig()
    return sample_groups(base, make_tasks("train")[:8], tok, cfg.env, cfg.sampler, torch.Generator().manual_seed(1))
