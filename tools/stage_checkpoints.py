"""Stage each unfinished run's newest whole checkpoint and its log.jsonl for commit, and unstage the checkpoints
it replaced, so that the run resumes from a fresh clone on a new machine (run folders are git-ignored: a machine's
work tree does not outlive it).

    python tools/stage_checkpoints.py [ROOT ...]     # default: results/converged results/recipes; then git commit

A run folder is any folder under a ROOT that holds step_N checkpoints; it is finished once it has its results.json,
and then none of its checkpoints stay staged. Pause the runs first (pkill -STOP -f examples/train.py): a checkpoint
caught mid-save is staged incomplete, and `--resume_from_checkpoint latest` then skips it for the one before.
"""

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train import latest_checkpoint  # noqa: E402


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def stage(roots: list[Path]) -> list[Path]:
    """Stage the newest whole checkpoint of each unfinished run under `roots`; unstage every other step_N file."""
    kept = []
    for root in roots:
        for run in sorted({p.parent for p in root.glob("**/step_*") if p.is_dir()}):
            newest = None if (run / "results.json").exists() else latest_checkpoint(run)
            if newest is not None:
                git("add", "-f", "--", str(newest), *[str(p) for p in [run / "log.jsonl"] if p.exists()])
                kept.append(newest)
    tracked = {Path(*p.parts[: i + 1]) for p in map(Path, git("ls-files", "--", *map(str, roots)).splitlines())
               for i, part in enumerate(p.parts) if part.startswith("step_")}  # fmt: skip
    for step in sorted(tracked - set(kept)):
        git("rm", "-r", "-q", "--cached", "--", str(step))
    return kept


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="*", type=Path, default=[Path("results/converged"), Path("results/recipes")])
    for folder in stage(ap.parse_args(argv).roots):
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        print(f"staged {folder} ({size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
