"""examples/train.py, killed with SIGKILL inside a checkpoint save: `KILL_AT=S:E` kills the process at the E-th file
operation of its S-th save (counted from this process's start). A file write (the manifest's included) is cut
halfway, an `os.replace` is killed before or after it happens (two events), a `shutil.rmtree` after deleting one file.
`KILL_AT_STEP=N` kills it right after its N-th optimizer step instead (during training, between saves), and
`HANG_AT_STEP=N` leaves it stuck there, alive (a rank whose peers wait for it in their next collective). Under
`accelerate launch` each rank counts its own events and steps; `KILL_RANK=R` kills rank R only. Used by
tests/test_checkpoints.py; the kill is a real SIGKILL, so nothing of the process runs after it. With `SIGNAL_AT` set
as well, the run also asks itself to stop (tests/signal_after_save.py), so a kill can land in the stop's save."""

import io
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

import accelerate.utils.other
import safetensors.torch
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train  # noqa: E402

from modeling_pointer_sentinel import checkpointing  # noqa: E402

KILL_SAVE, KILL_EVENT = (int(v) for v in os.environ.get("KILL_AT", "0:0").split(":"))
KILL_STEP, HANG_STEP = int(os.environ.get("KILL_AT_STEP", 0)), int(os.environ.get("HANG_AT_STEP", 0))
THIS_RANK = os.environ.get("KILL_RANK", os.environ.get("RANK", "0")) == os.environ.get("RANK", "0")
saves, events, steps = 0, 0, 0


def event() -> bool:
    """Count one file operation of the current save; True when it is the one to die at."""
    global events
    events += 1
    return THIS_RANK and saves == KILL_SAVE and events == KILL_EVENT


def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


original_save, original_replace, original_rmtree = torch.save, os.replace, shutil.rmtree
original_write_file = checkpointing.write_file


def torch_save(obj, f, *args, **kwargs):
    if not isinstance(f, (str, os.PathLike)):
        return original_save(obj, f, *args, **kwargs)
    if event():
        buffer = io.BytesIO()
        original_save(obj, buffer, *args, **kwargs)
        Path(f).write_bytes(buffer.getvalue()[: buffer.tell() // 2])
        die()
    return original_save(obj, f, *args, **kwargs)


def safe_save_file(tensors, filename, metadata=None):
    if event():
        Path(filename).write_bytes(safetensors.torch.save(tensors, metadata)[:-100])
        die()
    return safetensors.torch.save_file(tensors, filename, metadata)


def replace(src, dst):
    if event():
        die()
    original_replace(src, dst)
    if event():
        die()


def rmtree(path, *args, **kwargs):
    if Path(path).is_dir() and event():
        next(p for p in Path(path).rglob("*") if p.is_file()).unlink()
        die()
    return original_rmtree(path, *args, **kwargs)


def write_file(path, data):
    """checkpointing.py's own files: the states (JSON, safetensors) and the manifest."""
    if event():
        Path(path).write_bytes(data[: len(data) // 2])
        die()
    return original_write_file(path, data)


def step_taken(*_):
    global steps
    steps += 1
    if THIS_RANK and steps == KILL_STEP:
        die()
    if THIS_RANK and steps == HANG_STEP:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # deaf to the launcher too: only SIGKILL ends it
        threading.Event().wait()


def save_checkpoint(*args, **kwargs):
    global saves, events
    saves, events = saves + 1, 0
    return original_save_checkpoint(*args, **kwargs)


torch.save, os.replace, shutil.rmtree = torch_save, replace, rmtree
accelerate.utils.other.safe_save_file = safe_save_file
original_save_checkpoint, train.save_checkpoint = train.save_checkpoint, save_checkpoint
checkpointing.write_file = write_file
register_optimizer_step_post_hook(step_taken)

if "SIGNAL_AT" in os.environ:
    import signal_after_save  # noqa: F401,E402  (wraps the save counted above)

if __name__ == "__main__":
    train.main(sys.argv[1:])
