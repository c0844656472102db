"""tools/stage_checkpoints.py keeps exactly each unfinished run's newest whole checkpoint in git's index."""

import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "stage_checkpoints.py"


def checkpoint(folder: Path, whole: bool = True):
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w" * 10)
    if whole:
        (folder / "checkpoint.json").write_text(json.dumps({"step": 0, "files": {"model.safetensors": 10}}))


def stage(repo: Path) -> list[str]:
    done = subprocess.run([sys.executable, str(TOOL)], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted(subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True).stdout.split())


def test_stages_the_newest_whole_checkpoint_of_each_unfinished_run(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / ".gitignore").write_text("results/converged/*_plain/\nresults/recipes/*/\n")
    run, study = tmp_path / "results/converged/ptb_plain", tmp_path / "results/recipes/ptb_base"
    checkpoint(run / "step_2")
    checkpoint(run / "step_10")  # newer by number, not by name
    checkpoint(run / "step_12", whole=False)  # a save cut short
    (run / "log.jsonl").write_text("{}\n")
    checkpoint(study / "step_5")
    assert stage(tmp_path) == ["results/converged/ptb_plain/log.jsonl",
                               "results/converged/ptb_plain/step_10/checkpoint.json",
                               "results/converged/ptb_plain/step_10/model.safetensors",
                               "results/recipes/ptb_base/step_5/checkpoint.json",
                               "results/recipes/ptb_base/step_5/model.safetensors"]  # fmt: skip
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"], cwd=tmp_path, check=True)
    for old in ("step_2", "step_10", "step_12"):  # the run went on: its limit removed the older checkpoints
        subprocess.run(["rm", "-r", str(run / old)], check=True)
    checkpoint(run / "step_20")
    (study / "results.json").write_text("{}")  # the study run finished
    assert stage(tmp_path) == ["results/converged/ptb_plain/log.jsonl",
                               "results/converged/ptb_plain/step_20/checkpoint.json",
                               "results/converged/ptb_plain/step_20/model.safetensors"]  # fmt: skip
