"""tools/stage_checkpoints.py keeps exactly each unfinished run's newest whole checkpoint in git's index."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "stage_checkpoints.py"


def checkpoint(folder: Path, whole: bool = True):
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w" * 10)
    if whole:
        (folder / "checkpoint.json").write_text(json.dumps({"step": 0, "files": {"model.safetensors": 10}}))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def stage(repo: Path, *roots: str, cwd: Path | None = None) -> list[str]:
    done = subprocess.run([sys.executable, str(TOOL), *roots], cwd=cwd or repo, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted(git(repo, "ls-files", "results").split())


def commit(repo: Path):
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")


def test_stages_the_newest_whole_checkpoint_of_each_unfinished_run(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("results/converged/*_plain/\nresults/recipes/*/\n")
    run, study = tmp_path / "results/converged/ptb_plain", tmp_path / "results/recipes/step_lr_study/ptb_base"
    checkpoint(run / "step_2")
    checkpoint(run / "step_10")  # newer by number, not by name
    checkpoint(run / "step_12", whole=False)  # a save cut short
    checkpoint(run / "step_14.incomplete")
    (run / "log.jsonl").write_text("{}\n")
    checkpoint(study / "step_5")  # below a folder whose name starts as a checkpoint's
    (study / "log.jsonl").write_text("{}\n")
    both = ["results/converged/ptb_plain/log.jsonl",
            "results/converged/ptb_plain/step_10/checkpoint.json",
            "results/converged/ptb_plain/step_10/model.safetensors",
            "results/recipes/step_lr_study/ptb_base/log.jsonl",
            "results/recipes/step_lr_study/ptb_base/step_5/checkpoint.json",
            "results/recipes/step_lr_study/ptb_base/step_5/model.safetensors"]  # fmt: skip
    assert stage(tmp_path) == both
    git(tmp_path, "add", ".gitignore")
    commit(tmp_path)
    assert stage(tmp_path) == both and git(tmp_path, "status", "--porcelain") == ""  # nothing new: nothing changes
    for old in ("step_2", "step_10", "step_12"):  # the run went on: its limit removed the older checkpoints
        shutil.rmtree(run / old)
    checkpoint(run / "step_20")
    (study / "results.json").write_text("{}")  # the study run finished: its model and results stay, no checkpoint
    (study / "model.safetensors").write_bytes(b"m")
    (study / "modeling_pointer_sentinel.py").write_text("# save_pretrained's copy: the package supplies it\n")
    # from another folder, ROOTs given relative to it and absolute
    roots = ["../converged", str(tmp_path / "results/recipes")]
    assert stage(tmp_path, *roots, cwd=tmp_path / "results/recipes") == [
        "results/converged/ptb_plain/log.jsonl",
        "results/converged/ptb_plain/step_20/checkpoint.json",
        "results/converged/ptb_plain/step_20/model.safetensors",
        "results/recipes/step_lr_study/ptb_base/log.jsonl",
        "results/recipes/step_lr_study/ptb_base/model.safetensors",
        "results/recipes/step_lr_study/ptb_base/results.json",
    ]


def test_a_checkpoint_that_changed_while_staged_is_not_taken_for_whole(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("stage_checkpoints", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    git(tmp_path, "init", "-q")
    folder = tmp_path / "run" / "step_3"
    checkpoint(folder)
    git(tmp_path, "add", "run")
    assert tool.staged_whole(tmp_path, "run/step_3")
    (folder / "model.safetensors").write_bytes(b"w" * 4)  # the index caught the file mid-write
    git(tmp_path, "add", "run")
    (folder / "model.safetensors").write_bytes(b"w" * 10)
    assert not tool.staged_whole(tmp_path, "run/step_3")


def test_a_snapshot_that_would_overflow_the_submission_is_unstaged(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("results/converged/*_plain/\n")
    git(tmp_path, "add", ".gitignore")
    commit(tmp_path)
    since = git(tmp_path, "rev-parse", "HEAD").strip()
    (tmp_path / "big.bin").write_bytes(bytes(range(256)) * 1200)  # 300 KiB, committed, then removed: counts twice
    git(tmp_path, "add", "big.bin")
    commit(tmp_path)
    git(tmp_path, "rm", "-q", "big.bin")
    commit(tmp_path)
    run = tmp_path / "results/converged/ptb_plain/step_7"
    run.mkdir(parents=True)
    (run / "model.safetensors").write_bytes(b"w" * 100 * 1024)
    (run / "checkpoint.json").write_text(json.dumps({"step": 7, "files": {"model.safetensors": 100 * 1024}}))

    def run_tool(limit, *more):
        args = ["results/converged", "--since", since, "--limit_mib", str(limit), *more]
        return subprocess.run([sys.executable, str(TOOL), *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)  # fmt: skip

    within = run_tool(0.75)  # 2 x 300 KiB + 100 KiB and the manifest: 0.7 MiB
    assert within.returncode == 0, within.stderr[-3000:]
    assert "0.7 MiB of diffs" in within.stdout
    staged = git(tmp_path, "diff", "--cached", "--name-only")
    assert "results/converged/ptb_plain/step_7/model.safetensors" in staged
    shutil.rmtree(run)  # the run went on: a bigger checkpoint replaced it
    (run.parent / "step_9").mkdir()
    (run.parent / "step_9" / "model.safetensors").write_bytes(b"w" * 200 * 1024)
    (run.parent / "step_9" / "checkpoint.json").write_text(
        json.dumps({"step": 9, "files": {"model.safetensors": 200 * 1024}})
    )
    over = run_tool(0.75)  # 2 x 300 KiB + 200 KiB and the manifest: over 768 KiB
    assert over.returncode != 0 and "0.8 MiB" in over.stderr and "over --limit_mib 0.75" in over.stderr
    assert git(tmp_path, "diff", "--cached", "--name-only") == staged  # the index as the tool found it
    bad = run_tool(0.75, "--since", "no-such-revision")
    assert bad.returncode != 0 and "--since no-such-revision is not a commit" in bad.stderr
    assert git(tmp_path, "diff", "--cached", "--name-only") == staged
