import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from modeling_pointer_sentinel import PointerSentinelConfig, PointerSentinelForCausalLM  # noqa: E402


def tiny_config(**overrides) -> PointerSentinelConfig:
    kw = dict(vocab_size=23, embedding_size=8, hidden_size=12, num_layers=2, pointer_window=5, eos_token_id=0)
    kw.update(overrides)
    return PointerSentinelConfig(**kw)


def tiny_model(seed=0, **overrides) -> PointerSentinelForCausalLM:
    torch.manual_seed(seed)
    return PointerSentinelForCausalLM(tiny_config(**overrides))


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    return SHARED_DATA
