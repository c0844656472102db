"""examples/train.py that sends itself SIGUSR1 (a real signal, through train.py's own handler) right after its S-th
checkpoint save (`SIGNAL_AT=S`, counted from this process's start): a stop asked for mid-epoch at a known step.
Used by tests/test_checkpoints.py."""

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train  # noqa: E402

SIGNAL_AT, saves = int(os.environ["SIGNAL_AT"]), 0
original_save_checkpoint = train.save_checkpoint


def save_checkpoint(*args, **kwargs):
    global saves
    original_save_checkpoint(*args, **kwargs)
    saves += 1
    if saves == SIGNAL_AT:
        os.kill(os.getpid(), signal.SIGUSR1)


train.save_checkpoint = save_checkpoint

if __name__ == "__main__":
    train.main(sys.argv[1:])
