"""Stage each unfinished run's newest whole checkpoint and its log.jsonl for commit, and unstage the checkpoints
it replaced, so that the run resumes from a fresh clone on a new machine (run folders are git-ignored: a machine's
work tree does not outlive it).

    python tools/stage_checkpoints.py [ROOT ...]     # default: results/converged results/recipes; then git commit

A run folder is any folder under a ROOT that holds step_N checkpoints; it is finished once it has its results.json,
and then its own files (the trained model, tokenizer, results and log; not save_pretrained's copies of the modeling
code, which evaluate.py and export_pretrained.py take from the package) are staged instead of a checkpoint, which
is all that --dynamic and export_pretrained.py read, and what quality_runs.py takes for a finished run.
Each staged checkpoint is checked against its manifest as git holds it, and
the one it replaces is unstaged only then: a run that saved or tidied meanwhile makes this an error, not a commit
that cannot resume. Pause the runs first (pkill -STOP -f examples/train.py), and commit with a plain `git commit`:
`git commit -a` also records the deletion of a committed checkpoint that a running run has since replaced.
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train import MANIFEST, latest_checkpoint  # noqa: E402

STEP = re.compile(r"step_\d+")


def git(*args: str, repo: Path | None = None) -> str:
    where = ["-C", str(repo)] if repo else []
    return subprocess.run(["git", *where, "--literal-pathspecs", *args], check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


def staged_whole(repo: Path, folder: str) -> bool:
    """Whether the index holds every file of the checkpoint's manifest at its size."""
    sizes = {}
    for entry in filter(None, git("ls-files", "-s", "-z", "--", folder, repo=repo).split("\0")):
        meta, path = entry.split("\t", 1)  # "<mode> <blob> <stage>\t<path>"
        sizes[Path(path).name] = int(git("cat-file", "-s", meta.split(" ")[1], repo=repo))
    manifest = json.loads((repo / folder / MANIFEST).read_text())["files"]
    return MANIFEST in sizes and all(sizes.get(name) == size for name, size in manifest.items())


def stage(repo: Path, roots: list[Path]) -> list[str]:
    """Stage the newest whole checkpoint of each unfinished run under `roots` (relative to `repo`); unstage every
    other step_N folder; stage finished runs' own files. Returns the staged checkpoints."""
    kept = []
    for root in roots:
        if not (repo / root).is_dir():
            raise SystemExit(f"error: {root} is not a folder of {repo}")
        for run in sorted({p.parent for p in (repo / root).glob("**/step_*") if STEP.fullmatch(p.name) and p.is_dir()}):
            if (run / "results.json").exists():  # the trained model beside its results, without checkpoints
                # not save_pretrained's copies of the modeling code: the package that reads the run supplies it
                files = [
                    f.relative_to(repo).as_posix() for f in sorted(run.iterdir()) if f.is_file() and f.suffix != ".py"
                ]
                git("add", "-f", "--", *files, repo=repo)
            elif (newest := latest_checkpoint(run)) is not None:
                folder = newest.relative_to(repo).as_posix()
                log = [(run / "log.jsonl").relative_to(repo).as_posix()] if (run / "log.jsonl").exists() else []
                git("add", "-f", "--", folder, *log, repo=repo)
                if not staged_whole(repo, folder):
                    raise SystemExit(f"error: {folder} changed while it was staged: pause the runs and stage again")
                kept.append(folder)
    tracked = set(git("ls-files", "-z", "--", *(r.as_posix() for r in roots), repo=repo).split("\0")) - {""}
    steps = {"/".join(parts[: i + 1]) for parts in (t.split("/") for t in tracked)
             for i, part in enumerate(parts[:-1]) if STEP.fullmatch(part)}  # fmt: skip
    for path in sorted(steps - set(kept)):
        git("rm", "-r", "-q", "--cached", "--", path, repo=repo)
    return kept


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="*", type=Path, help="folders of run folders inside the repository (default: "
                    "results/converged and results/recipes)")  # fmt: skip
    given = ap.parse_args(argv).roots
    repo = Path(git("rev-parse", "--show-toplevel").strip())  # the repository this is run in
    try:
        roots = [(Path.cwd() / r).resolve().relative_to(repo) for r in given] or [
            Path("results/converged"),
            Path("results/recipes"),
        ]
    except ValueError:
        raise SystemExit(f"error: every ROOT must lie inside {repo}") from None
    for folder in stage(repo, roots):
        size = sum(p.stat().st_size for p in (repo / folder).iterdir() if p.is_file())
        print(f"staged {folder} ({size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
