"""The recipe study: training recipes for the 2x200 tied models compared at one equal budget of CPU time, on
validation perplexity only (the test split is never read).

    python examples/recipe_study.py --data DIR                        # every unfinished candidate, two at a time
    python examples/recipe_study.py --data DIR --only ptb_plain_base ptb_plain_awd
    python examples/recipe_study.py --list                            # the candidates and their settings

DIR holds your copies of ptb/ptb.{train,valid,test}.txt and wikitext-2/wiki.{train,valid,test}.tokens.

Every candidate keeps the shape (2 layers x 200, tied, pointer window 100) and changes the recipe only: optimiser,
regularisation, batch and BPTT, the softmax. It trains for --minutes of its own CPU time (`train.py --clock cpu`, one
thread), so two runs side by side on a busy machine get the same budget; each run checkpoints every 200 updates and the
same command after any stop resumes it where it stopped, its budget counting every resumed part. Finished candidates
(results.json in their folder) are kept. Writes OUT/results.json (a row per candidate: its settings, budget,
validation perplexity, epochs, targets, the exact command) and OUT/README.md (the table, best first per dataset).
"""

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality_runs import CONVERGE, ROOT, SGD, data_flags, git_revision, run_config  # noqa: E402

# The converged runs' recipe, as a budget run: no early stop (the budget ends it), LR x0.25 at each plateau.
BASE = {**CONVERGE, "patience": 1000, "checkpoints_total_limit": 1, "num_train_epochs": 1000}
# AWD-LSTM's regularisers (Merity et al. 2017) at its PTB values, scaled to a 200-unit model's smaller capacity.
AWD = {"embedding_dropout": 0.1, "input_dropout": 0.4, "hidden_dropout": 0.25, "output_dropout": 0.4,
       "weight_drop": 0.5}  # fmt: skip

# name: (dataset, use_pointer, model overrides, training overrides, why)
CANDIDATES = {
    "ptb_plain_base": ("ptb", False, {}, {}, "the shipped models' recipe: AdamW 3e-3, dropout 0.2, batch 32"),
    "ptb_plain_awd": ("ptb", False, AWD, {"alpha": 2.0, "beta": 1.0}, "AdamW with AWD-LSTM's dropouts and AR/TAR"),
    "ptb_plain_sgd": ("ptb", False, {}, SGD, "GluonNLP's SGD + NT-ASGD, dropout 0.2"),
    "ptb_plain_sgd_awd": (
        "ptb",
        False,
        AWD,
        {**SGD, "learning_rate": 30.0, "alpha": 2.0, "beta": 1.0},
        "AWD-LSTM: SGD 30 + NT-ASGD, its dropouts and AR/TAR",
    ),  # fmt: skip
    "ptb_plain_b64_bptt70": (
        "ptb",
        False,
        {},
        {"per_device_train_batch_size": 64, "bptt": 70},
        "the shipped recipe at batch 64, BPTT 70 (throughput on CPU)",
    ),  # fmt: skip
    # WikiText-2: the adaptive softmax's shape against the full softmax (tail projections 50 and 12 wide today)
    "wt2_plain_sgd": ("wt2", False, {}, SGD, "GluonNLP's SGD + NT-ASGD, adaptive softmax [2000, 10000], div 4"),
    "wt2_plain_base": ("wt2", False, {}, {}, "the shipped recipe, adaptive softmax [2000, 10000], div 4"),
    "wt2_plain_full_softmax": ("wt2", False, {"adaptive_softmax_cutoffs": []}, {}, "the shipped recipe, full softmax"),
    "wt2_plain_div2": (
        "wt2",
        False,
        {"adaptive_softmax_div_value": 2.0},
        {},
        "adaptive softmax, div 2 (wider tails; 9.33M parameters, over the 8.1M bound)",
    ),  # fmt: skip
    "wt2_plain_cutoffs_4000": (
        "wt2",
        False,
        {"adaptive_softmax_cutoffs": [4000, 15000]},
        {},
        "adaptive softmax [4000, 15000], div 4",
    ),  # fmt: skip
    # the full softmax leads per epoch, but on one CPU thread an epoch of it costs ~5x the adaptive one's (0.92
    # epoch in 45 CPU-minutes against 4.5)
    "wt2_plain_sgd_cutoffs_4000": (
        "wt2",
        False,
        {"adaptive_softmax_cutoffs": [4000, 15000]},
        SGD,
        "GluonNLP's SGD + NT-ASGD, adaptive softmax [4000, 15000], div 4",
    ),  # fmt: skip
    "wt2_plain_sgd_cutoffs_4000_12500": (
        "wt2",
        False,
        {"adaptive_softmax_cutoffs": [4000, 12500]},
        SGD,
        "GluonNLP's SGD + NT-ASGD, adaptive softmax [4000, 12500], div 4 (the 4,000-word head within the bound)",
    ),  # fmt: skip
}


def config(name: str) -> dict:
    """The train.py --config of one candidate."""
    dataset, use_pointer, model, training, _ = CANDIDATES[name]
    return run_config(dataset, use_pointer, {**BASE, **training}, model)


def command(name: str, data: str, out: Path, minutes: float) -> list[str]:
    """The train.py command of one candidate (its config file written beside its run folder)."""
    dataset = CANDIDATES[name][0]
    cfg = out / f"{name}.json"
    cfg.write_text(json.dumps(config(name), indent=2))
    return [sys.executable, str(ROOT / "examples" / "train.py"), "--config", str(cfg),
            *data_flags(Path(data), dataset, test=False), "--output_dir", str(out / name), "--num_threads", "1",
            "--clock", "cpu", "--max_train_minutes", f"{minutes:g}", "--resume_from_checkpoint", "latest"]  # fmt: skip


def run_all(names: list[str], data: str, out: Path, minutes: float, parallel: int):
    """Train the unfinished candidates, `parallel` at a time (one thread each)."""
    todo = [n for n in names if not (out / n / "results.json").exists()]
    running: list[tuple[subprocess.Popen, str]] = []
    while todo or running:
        while todo and len(running) < parallel:
            name = todo.pop(0)
            log = open(out / f"{name}.train.log", "a")
            print(f"training {name}", flush=True)
            running.append((subprocess.Popen(command(name, data, out, minutes), stdout=log, stderr=subprocess.STDOUT),
                            name))  # fmt: skip
        time.sleep(5)
        for proc, name in [r for r in running if r[0].poll() is not None]:
            running.remove((proc, name))
            if proc.returncode != 0:
                raise SystemExit(f"{name} failed: see {out / f'{name}.train.log'}")
            print(f"finished {name}", flush=True)
            write_table(out, minutes)


def write_table(out: Path, minutes: float):
    """results.json and README.md from every finished candidate."""
    rows = {}
    for name, (dataset, use_pointer, model, training, why) in CANDIDATES.items():
        done = out / name / "results.json"
        if not done.exists():
            continue
        r = json.loads(done.read_text())
        cmd = " ".join(shlex.quote(c) for c in command(name, "DIR", Path("results/recipes"), minutes)[1:])
        rows[name] = {"dataset": dataset, "model": "pointer" if use_pointer else "plain", "why": why,
                      "model_overrides": model, "training_overrides": training, "budget_cpu_minutes": minutes,
                      "train_minutes": r["train_minutes"], "valid_ppl": r["validation_ppl"],
                      "epoch_validated": r["best_validation_ppl"] is not None, "params": r["params"],
                      "epochs": r["epochs"], "targets_seen": r["targets_seen"], "stopped": r["stopped"],
                      "revision": git_revision(), "command": f"python {cmd}"}  # fmt: skip
    (out / "results.json").write_text(json.dumps(rows, indent=2))
    lines = ["# Recipe study (validation only)", "",
             f"2 layers x 200, tied, pointer window 100; {minutes:g} minutes of CPU time per candidate (one thread, "
             "`--clock cpu`), two side by side. Written by `python examples/recipe_study.py --data DIR`; each row's "
             "exact command is in results.json. Valid ppl: the saved weights', those of the best epoch-end validation "
             "(marked * where the budget ended before the first one: the last weights).", "",
             "| candidate | dataset | model | recipe | params | valid ppl | epochs | targets |",
             "|---|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for name, r in sorted(rows.items(), key=lambda kv: (kv[1]["dataset"], kv[1]["model"], kv[1]["valid_ppl"])):
        mark = "" if r["epoch_validated"] else "*"
        lines.append(f"| {name} | {r['dataset']} | {r['model']} | {r['why']} | {r['params'] / 1e6:.2f}M | "
                     f"{r['valid_ppl']:.2f}{mark} | "
                     f"{r['epochs']:.1f} | {r['targets_seen'] / 1e6:.1f}M |")  # fmt: skip
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="folder with ptb/ and wikitext-2/ text files")
    ap.add_argument("--only", nargs="+", choices=sorted(CANDIDATES), help="these candidates (default: all)")
    ap.add_argument("--minutes", type=float, default=45.0, help="CPU minutes per candidate (default: %(default)s)")
    ap.add_argument("--parallel", type=int, default=2, help="candidates trained at once (default: %(default)s)")
    ap.add_argument("--out", default=str(ROOT / "results" / "recipes"))
    ap.add_argument("--list", action="store_true", help="print the candidates and stop")
    args = ap.parse_args(argv)
    if args.list:
        for name, (dataset, use_pointer, model, training, why) in CANDIDATES.items():
            kind = "pointer" if use_pointer else "plain"
            print(f"{name} ({dataset}, {kind}): {why}\n    model {model}\n    training {training}")
        return
    if not args.data or not Path(args.data).is_dir():
        ap.error("--data must name the folder holding ptb/ and wikitext-2/")
    if args.minutes <= 0 or args.parallel < 1:
        ap.error("--minutes must be > 0 and --parallel >= 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_all(args.only or list(CANDIDATES), args.data, out, args.minutes, args.parallel)
    write_table(out, args.minutes)
    print((out / "README.md").read_text())


if __name__ == "__main__":
    main()
