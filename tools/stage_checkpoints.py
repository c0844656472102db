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
that cannot resume. Stop the runs at their next epoch end first (pkill -USR1 -f "examples/train.py --config": each
saves a checkpoint there and exits; the same command resumes it), or pause them (pkill -STOP -f examples/train.py),
and commit with a plain `git commit`:
`git commit -a` also records the deletion of a committed checkpoint that a running run has since replaced.

A submission's diffs may add up to 256 MiB, and a whole submission over it is refused: so the tool adds up what the
commits since --since (default HEAD) and the staged change would submit, counting each changed file's old and new
contents whole (what a binary file costs; a bound for text), and over --limit_mib it puts the ROOTs' index back as it
found them and stops. Pass the revision the last landed submission ended on, and stage once, near the session's
end: each snapshot counts again, and so does the deletion of the one it replaces. A WikiText-2 2x200 checkpoint holds
32 MB a copy of the weights; with SGD, at an epoch end that improved, one copy before NT-ASGD averages and two after
(mid-epoch or after a stall: one more).
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from modeling_pointer_sentinel.checkpointing import MANIFEST, latest_checkpoint  # noqa: E402

STEP = re.compile(r"step_\d+")
LIMIT_MIB = 200  # the submission limit is 256 MiB of diffs: room for the code, cards and logs beside the snapshot


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


def blob_sizes(repo: Path, blobs: list[str]) -> list[int]:
    out = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch-check=%(objectsize)"], input="\n".join(blobs),
                         check=True, capture_output=True, text=True).stdout.split()  # fmt: skip
    return [int(n) for n in out]


def diff_bytes(repo: Path, *between: str) -> int:
    """The old and new contents of every file that changes `between` two revisions (or HEAD and the index, given
    "--cached", "HEAD"), each counted whole; a submodule's commit and a change of mode alone count nothing."""
    raw = git("diff", "--raw", "-z", "--no-renames", "--no-abbrev", *between, repo=repo).split("\0")
    blobs = []
    for meta in raw[0::2]:
        if meta.startswith(":"):
            old_mode, new_mode, old, new = meta[1:].split()[:4]
            if old != new:
                blobs += [b for b, mode in ((old, old_mode), (new, new_mode)) if b.strip("0") and mode != "160000"]
    return sum(blob_sizes(repo, blobs)) if blobs else 0


def has_commit(repo: Path) -> bool:
    return bool(
        subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify", "HEAD"], capture_output=True).stdout
    )


def submission_bytes(repo: Path, since: str) -> int:
    """What the commits after `since` and the staged change add up to as diffs: each commit against its first
    parent, so a file added in one and removed in a later one counts twice."""
    empty = git("hash-object", "-t", "tree", "/dev/null", repo=repo).strip()
    if not has_commit(repo):  # no commit yet: everything staged is new
        return diff_bytes(repo, "--cached", empty)
    lines = git("rev-list", "--parents", "--first-parent", f"{since}..HEAD", repo=repo).splitlines()
    commits = sum(diff_bytes(repo, (ids + [empty])[1], ids[0]) for ids in (line.split() for line in lines))
    return commits + diff_bytes(repo, "--cached", "HEAD")


def resolve(repo: Path, since: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify", f"{since}^{{commit}}"],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode and has_commit(repo):  # before the first commit there is nothing to count from
        raise SystemExit(f"error: --since {since} is not a commit of {repo}")
    return done.stdout.strip()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="*", type=Path, help="folders of run folders inside the repository (default: "
                    "results/converged and results/recipes)")  # fmt: skip
    ap.add_argument("--since", default="HEAD", help="the revision the submission starts after (default HEAD: only "
                    "what is staged counts)")  # fmt: skip
    ap.add_argument("--limit_mib", type=float, default=LIMIT_MIB, help=f"the most the submission's diffs may add up "
                    f"to (default {LIMIT_MIB})")  # fmt: skip
    args = ap.parse_args(argv)
    given = args.roots
    repo = Path(git("rev-parse", "--show-toplevel").strip())  # the repository this is run in
    try:
        roots = [(Path.cwd() / r).resolve().relative_to(repo) for r in given] or [
            Path("results/converged"),
            Path("results/recipes"),
        ]
    except ValueError:
        raise SystemExit(f"error: every ROOT must lie inside {repo}") from None
    since = resolve(repo, args.since)
    before = git("write-tree", repo=repo).strip()  # the index as it was, to go back to
    for folder in stage(repo, roots):
        size = sum(p.stat().st_size for p in (repo / folder).iterdir() if p.is_file())
        print(f"staged {folder} ({size / 2**20:.1f} MiB)")
    total = submission_bytes(repo, since) / 2**20
    if total > args.limit_mib:
        git("reset", "-q", before, "--", *(r.as_posix() for r in roots), repo=repo)
        raise SystemExit(f"error: the commits since {args.since} and this staging would submit {total:.1f} MiB of "
                         f"diffs, over --limit_mib {args.limit_mib:g}; the ROOTs are staged as before")  # fmt: skip
    print(f"the commits since {args.since} and this staging: {total:.1f} MiB of diffs (limit {args.limit_mib:g})")


if __name__ == "__main__":
    main()
