import os
import sys
from pathlib import Path

import pytest
import torch


def usable_cores(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The cores this process may run on: its CPU affinity, under the cgroup's CPU quota where one is set (a container's
    CPU limit, which os.cpu_count() and psutil do not see)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()
        return max(1, min(cores, int(quota) // int(period)))
    except (OSError, ValueError):  # no cgroup v2 file, or "max": no quota
        return cores


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): one worker per usable core; PYTEST_XDIST_AUTO_NUM_WORKERS still overrides."""
    return None if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") else usable_cores()


# Each worker, and each process its tests start, takes its share of the cores: oversubscribed OpenMP threads slow the
# fused LSTM many times over.
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 0)):
    threads = max(1, usable_cores() // workers)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from modeling_pointer_sentinel import PointerSentinelConfig, PointerSentinelForCausalLM  # noqa: E402


def tiny_config(**overrides) -> PointerSentinelConfig:
    kw = dict(vocab_size=23, embedding_size=8, hidden_size=12, num_layers=2, pointer_window=5, eos_token_id=0)
    kw.update(overrides)
    return PointerSentinelConfig(**kw)


def finite(x: torch.Tensor) -> torch.Tensor:
    """Generate's scores as forward's `logits` write them: -inf (transformers' processors' mark) as the lowest value."""
    return x.clamp_min(torch.finfo(x.dtype).min)


def tiny_model(seed=0, **overrides) -> PointerSentinelForCausalLM:
    torch.manual_seed(seed)
    return PointerSentinelForCausalLM(tiny_config(**overrides))


def oov_heads_counting(m: PointerSentinelForCausalLM) -> PointerSentinelForCausalLM:
    """With `oov_pointer`, the repeat odds' and the context query's weights (0 at the start) moved away from 0, so
    that a path that ignored them would score differently."""
    if m.config.oov_pointer:
        with torch.no_grad():
            m.pointer.oov_repeat.weight.normal_(generator=torch.Generator().manual_seed(1))
            m.pointer.oov_repeat.bias.fill_(0.7)
            m.pointer.oov_context.weight.normal_(generator=torch.Generator().manual_seed(2))
            m.pointer.oov_context.bias.normal_(generator=torch.Generator().manual_seed(3))
    return m


def evaluate_script():
    """examples/evaluate.py's main (the examples folder is not a package)."""
    sys.path.insert(0, str(ROOT / "examples"))
    from evaluate import main

    return main


def evaluation_files(folder: Path, repeats: int):
    """A small learnable corpus as train/valid/test files in `folder`: the training lines, a tokenizer built on them,
    and the data flags that name the files. The three splits differ (same words, other lines), so a choice made on
    the wrong split shows."""
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

    lines = ["a b c a b c d", "e f a b", "c d e f a", "b c a b c"] * repeats
    other = {"valid": ["b c a b", "d e f a b c", "a b c d", "f a b"], "test": ["c d e f a", "a b c a", "e f a b c d"]}
    for split, text in (("train", lines), ("valid", other["valid"] * repeats), ("test", other["test"] * repeats)):
        (folder / f"{split}.txt").write_text("\n".join(text) + "\n")
    files = ["--train_file", str(folder / "train.txt"), "--validation_file", str(folder / "valid.txt"),
             "--test_file", str(folder / "test.txt")]  # fmt: skip
    return lines, build_word_level_tokenizer(lines), files


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    return SHARED_DATA
