"""Quality runs on a CPU: a plain LSTM and a Pointer Sentinel-LSTM of the same size (2x200, tied embeddings,
dropout 0.2), same tokenizer, data and schedule, trained side by side, then evaluated: the plain model also with
Grave et al.'s neural cache (window, theta, lambda chosen on validation), the pointer model also with its pointer
switched off (g = 1).

    python examples/quality_runs.py --converge --data DIR                  # PTB to convergence (4.6 h measured)
    python examples/quality_runs.py --converge --datasets wt2 --data DIR   # WikiText-2 to convergence
    python examples/quality_runs.py --converge --datasets wt2 --recipe sgd --clock cpu --data DIR  # timed in CPU time
    python examples/quality_runs.py --converge --recipe sgd --data DIR     # PTB with SGD 20 + NT-ASGD, batch 20
    python examples/quality_runs.py --dynamic --data DIR                   # then PTB's dynamic evaluation rows
    python examples/quality_runs.py --minutes 20 --data DIR                # PTB and WikiText-2, 20 minutes per model

DIR holds your copies of ptb/ptb.{train,valid,test}.txt and wikitext-2/wiki.{train,valid,test}.tokens; without
--data the Hub datasets `ptb_text_only` and `wikitext` (wikitext-2-v1) are used.

--converge: AdamW, LR x0.25 whenever validation perplexity does not beat its best by at least 0.1%, stop after 2 such
epochs in a row; --recipe sgd: GluonNLP's SGD at 20 with NT-ASGD averaging (batch 20, clip 0.25): 5 such epochs
before the averaging starts it, after it each lowers the LR x0.25 and 5 in a row stop; its files and results.json
block named NAME_sgd. Checkpoints every 200 updates; running the same command again resumes each unfinished model
where it stopped. `pkill -USR1 -f "examples/train.py --config .*results/converged"` stops each run at its next epoch
end with a checkpoint there, the smallest when that epoch improved (what tools/stage_checkpoints.py commits for the
next machine).
WikiText-2 (33,278 words) uses an adaptive softmax (WT2_CUTOFFS; the sgd recipe's own, RECIPE_MODEL) in both models,
the same recipe otherwise. Each
dataset adds its block to OUT/results.json ({"ptb": {"pointer", "plain", "plain_cache", "pointer_off"}, "wt2": ...,
"runs": {dataset: model, recipe, revision, command, validation curves}}) and writes OUT/<dataset>_learning_curves.png.
--dynamic (after --converge): Krause et al.'s dynamic evaluation of both converged models (the run in OUT, else
the shipped folder in pretrained/), at batch size 1 with lr, lambda and segment length chosen on the first 10,000
validation tokens, and the neural cache on top (chosen again on the adapting model's validation outputs); adds
<kind>_dynamic and <kind>_dynamic_cache rows to the dataset's block, each with its settings and the
examples/evaluate.py command that reproduces it. An evaluation already written by the same command on the same model
files and code (its .job.json) is reused, not run again, and a stopped grid keeps the points it scored
(OUT/<dataset>_<kind>.dynamic_grid.jsonl).
--minutes: a fixed wall-clock budget per model (not convergence). Writes OUT/results.json, OUT/results.md and
pictures to OUT/<dataset>_plots/.

The two models of a dataset train at the same time, one CPU thread each, so they share the machine's load equally.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODEL = {"embedding_size": 200, "hidden_size": 200, "num_layers": 2, "tie_word_embeddings": True,
         "pointer_window": 100, "input_dropout": 0.2, "hidden_dropout": 0.2, "output_dropout": 0.2}  # fmt: skip
TRAINING = {"scheme": "stateful", "bptt": 35, "per_device_train_batch_size": 32, "per_device_eval_batch_size": 10,
            "optimizer": "adamw", "learning_rate": 0.003, "clip": 0.25, "lr_decay": 0.5, "patience": 3,
            "num_train_epochs": 100, "log_every": 100}  # fmt: skip
CONVERGE = {**TRAINING, "lr_decay": 0.25, "patience": 2, "min_improvement": 0.001, "checkpointing_steps": 200,
            "checkpoints_total_limit": 1}  # fmt: skip
# GluonNLP's standard_lstm_lm_200 recipe: SGD at 20 with NT-ASGD averaging, batch 20, BPTT 35, clip 0.25.
SGD = {"optimizer": "ntasgd", "learning_rate": 20.0, "per_device_train_batch_size": 20, "clip": 0.25}
# --converge's recipes. NT-ASGD's averaging starts after a non-monotone window of 5 validations, so its patience is 5
# rather than 2: 5 without a 0.1% gain start the averaging; then each such validation lowers the LR x0.25 (GluonNLP
# lowers its rate on the average's plateaus too) and 5 in a row stop it.
RECIPES = {"adamw": CONVERGE, "sgd": {**CONVERGE, **SGD, "patience": 5}}
# A recipe's model settings per dataset, over DATASET_MODEL's. The sgd recipe's WikiText-2 head holds the 4,000 most
# frequent words: the recipe study's [4000, 15000] led [2000, 10000] by 8 points at 45 CPU-minutes (157.08 vs 165.16)
# but has 8.15M parameters with the pointer; [4000, 12500] keeps that head within the 8.06M of the shipped models.
RECIPE_MODEL = {"sgd": {"wt2": {"adaptive_softmax_cutoffs": [4000, 12500]}}}
# WikiText-2's 33,278-word softmax is ~90% of a 2x200 model's cost; an adaptive softmax's head holds the frequent words.
WT2_CUTOFFS = [2000, 10000]
DATASET_MODEL = {"ptb": {}, "wt2": {"adaptive_softmax_cutoffs": WT2_CUTOFFS}}
TITLES = {"ptb": "PTB", "wt2": "WikiText-2"}
HUB = {"ptb": ["--dataset_name", "ptb_text_only"], "wt2": ["--dataset_name", "wikitext", "--dataset_config_name",
                                                            "wikitext-2-v1"]}  # fmt: skip
KINDS = (("plain", False), ("pointer", True))
SHIPPED = {"ptb": {"pointer": "ptb-pointer-sentinel-lstm-2x200", "plain": "ptb-lstm-2x200"},
           "wt2": {"pointer": "wt2-pointer-sentinel-lstm-2x200", "plain": "wt2-lstm-2x200"}}  # fmt: skip
# Krause et al.'s dynamic evaluation at batch size 1: lr, lambda and segment length chosen on the first validation
# tokens; the neural cache on top takes its window, theta and lambda from the static model's validation grid.
DYNAMIC = ["--batch_size", "1", "--dynamic", "--dynamic_grid", "--dynamic_grid_segments", "5", "20",
           "--dynamic_grid_tokens", "10000", "--cache_grid"]  # fmt: skip


def data_flags(data: Path | None, name: str, test: bool = True) -> list[str]:
    """train.py's data flags for dataset `name`: the Hub's copy, or the files in `data`; test=False leaves the test
    split out (the Hub's datasets come whole, so that needs `data`)."""
    if data is None:
        if not test:
            raise ValueError("leaving the test split out needs a data folder: the Hub datasets come with theirs")
        return HUB[name]
    if name == "ptb":
        f = {s: data / "ptb" / f"ptb.{s}.txt" for s in ("train", "valid", "test")}
    else:
        f = {s: data / "wikitext-2" / f"wiki.{s}.tokens" for s in ("train", "valid", "test")}
    flags = ["--train_file", str(f["train"]), "--validation_file", str(f["valid"])]
    return flags + ["--test_file", str(f["test"])] if test else flags


def model_settings(name: str, model: dict | None = None) -> dict:
    """The 2x200 model of dataset `name`: the shared shape, the dataset's softmax, then any `model` overrides."""
    return {**MODEL, **DATASET_MODEL[name], **(model or {})}


def run_config(name: str, use_pointer: bool, training: dict, model: dict | None = None) -> dict:
    """train.py's --config for one 2x200 run on dataset `name`: `model_settings` and the model's kind, then the
    `training` settings."""
    return {"model": {**model_settings(name, model), "use_pointer": use_pointer}, **training}


def train_pair(name: str, out: Path, data: Path | None, training: dict, extra: list[str], tag: str = "",
               model: dict | None = None) -> dict:  # fmt: skip
    """Train the plain and the pointer model of dataset `name` at once (one thread each), with `model`'s settings
    over the dataset's; a model whose results.json exists is kept. Files are named after `tag` (default: `name`)."""
    procs, runs, tag = [], {}, tag or name
    for kind, use_pointer in KINDS:
        cfg_path = out / f"{tag}_{kind}.json"
        cfg_path.write_text(json.dumps(run_config(name, use_pointer, training, model), indent=2))
        runs[kind] = run_dir = out / f"{tag}_{kind}"
        if (run_dir / "results.json").exists():
            continue
        cmd = [sys.executable, str(ROOT / "examples" / "train.py"), "--config", str(cfg_path), *data_flags(data, name),
               "--output_dir", str(run_dir), "--num_threads", "1", *extra]  # fmt: skip
        log = open(out / f"{tag}_{kind}.train.log", "a")
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), kind))
    for proc, kind in procs:
        if proc.wait() != 0:
            raise SystemExit(f"training {tag}/{kind} failed: see {out / f'{tag}_{kind}.train.log'}")
    if stopped := [kind for kind, run_dir in runs.items() if not (run_dir / "results.json").exists()]:
        again = "resumes from the checkpoint saved there" if "latest" in extra else "starts it afresh (not resumed)"
        raise SystemExit(f"{tag}: {', '.join(stopped)} stopped at an epoch end as asked (SIGUSR1); the same command "
                         f"{again}")  # fmt: skip
    for kind, run_dir in runs.items():  # keep the logs beside the (ignored) model directories
        shutil.copy(run_dir / "log.jsonl", out / f"{tag}_{kind}.log.jsonl")
        shutil.copy(run_dir / "results.json", out / f"{tag}_{kind}.results.json")
    return runs


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def job_key(model: Path, args: list[str]) -> dict:
    """What an evaluation's result depends on: its command line, the model's files and the code that evaluates it."""
    code = [ROOT / "examples" / "evaluate.py", ROOT / "examples" / "cli.py",
            *sorted((ROOT / "modeling_pointer_sentinel").glob("*.py"))]  # fmt: skip
    files = sorted(p for p in model.iterdir() if p.is_file() and p.suffix in (".json", ".safetensors"))
    return {"args": args, "model": {p.name: sha256(p) for p in files},
            "code": {str(p.relative_to(ROOT)): sha256(p) for p in code}}  # fmt: skip


def evaluate_all(jobs: list[tuple[Path, str, Path, list[str]]], data: Path | None) -> list[dict]:
    """examples/evaluate.py on each (model, dataset, out_json, extra flags) at once, one CPU thread each (test split
    unless the flags say otherwise: batch 10, BPTT 200, state carried). A job whose out_json was written by the same
    command on the same model files and code (its .job.json says so) is not run again: a stop during a long
    evaluation (dynamic evaluation takes half an hour a model) loses only the evaluations still running, and one
    that fails stops the command only once the others have ended and been recorded."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread per process: two on a shared 2-core CPU thrash
    t0, procs = time.time(), []
    for model, name, out_json, extra in jobs:
        cmd = [sys.executable, str(ROOT / "examples" / "evaluate.py"), str(model), *data_flags(data, name),
               "--output_json", str(out_json), *extra]  # fmt: skip
        # the key names no folder of this machine: the same job on a fresh clone is the same job
        args = [a.replace(str(ROOT), "ROOT").replace(str(data), "DIR") if data else a.replace(str(ROOT), "ROOT")
                for a in cmd[2:]]  # fmt: skip
        key, record = job_key(model, args), out_json.with_suffix(".job.json")
        if out_json.exists() and record.exists() and json.loads(record.read_text())["key"] == key:
            print(f"{out_json.name}: the same evaluation of the same model and code is done; reusing it", flush=True)
            procs.append((None, None, out_json, record, key))
            continue
        record.unlink(missing_ok=True)
        log = open(out_json.with_suffix(".log"), "w")
        procs.append(
            (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env), log, out_json, record, key)
        )
    running, failed = [job for job in procs if job[0] is not None], []
    while running:  # each recorded as it ends, whatever the order they started in
        for job in [job for job in running if job[0].poll() is not None]:
            proc, log, out_json, record, key = job
            log.close()
            running.remove(job)
            if proc.returncode != 0:  # the others go on: each is up to an hour's work that a rerun then reuses
                failed.append(log.name)
                continue
            record.write_text(json.dumps({"key": key, "eval_minutes": (time.time() - t0) / 60}, indent=2))
        if running:
            time.sleep(1)
    if failed:
        raise SystemExit(f"evaluation failed: see {', '.join(failed)} (the others are recorded and will be reused)")
    results = []
    for _, _, out_json, record, _ in procs:
        result = json.loads(out_json.read_text())
        result["eval_minutes"] = json.loads(record.read_text())["eval_minutes"]
        results.append(result)
    return results


def evaluate(model: Path, name: str, data: Path | None, out_json: Path, *extra: str) -> dict:
    return evaluate_all([(model, name, out_json, list(extra))], data)[0]


def saved_results(path: Path) -> dict:
    """OUT/results.json as written so far (every dataset's block), or {} before the first."""
    return json.loads(path.read_text()) if path.exists() else {}


def validation_curve(log_jsonl: Path) -> dict[int, float]:
    """Validation perplexity per epoch (1-based) from train.py's log; a resumed run's repeated epochs keep the last."""
    curve = {}
    for line in log_jsonl.read_text().splitlines():
        r = json.loads(line)
        if "valid_ppl" in r:
            curve[r["epoch"] + 1] = r["valid_ppl"]
    return curve


def plot_learning_curves(curves: dict[str, dict[int, float]], path: Path, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, curve in curves.items():
        ax.plot(list(curve), list(curve.values()), marker="o", markersize=3, label=label)
    ax.set(xlabel="epoch", ylabel="validation perplexity", title=title, yscale="log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def git_revision() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def converge(out: Path, data: Path | None, name: str, recipe: str = "adamw", clock: str = "wall") -> dict:
    """One dataset to convergence with one of RECIPES: both models until validation stops improving; its block
    joins results.json under the dataset's name (adamw) or NAME_RECIPE. `clock`: what train_minutes counts."""
    tag, model = block_name(name, recipe), RECIPE_MODEL.get(recipe, {}).get(name)
    extra = ["--resume_from_checkpoint", "latest", "--clock", clock]
    runs = train_pair(name, out, data, RECIPES[recipe], extra, tag, model)
    train = {k: json.loads((runs[k] / "results.json").read_text()) for k in runs}
    plain, pointer, pointer_val = evaluate_all([
        (runs["plain"], name, out / f"{tag}_plain.eval.json", ["--cache_grid"]),
        (runs["pointer"], name, out / f"{tag}_pointer.eval.json", []),
        (runs["pointer"], name, out / f"{tag}_pointer.valid.eval.json", ["--split", "validation"]),
    ], data)  # fmt: skip

    def row(kind, test_ppl, valid_ppl, **more):
        t = train[kind]
        return {"test_ppl": test_ppl, "valid_ppl": valid_ppl, "epochs": t["epochs"], "stopped": t["stopped"],
                "params": t["params"], "train_minutes": t["train_minutes"], **more}  # fmt: skip

    best = plain["cache_grid_best_on_validation"]
    path = out / "results.json"
    results = saved_results(path)
    results[tag] = {
        "pointer": row("pointer", pointer["ppl"], train["pointer"]["validation_ppl"]),
        "plain": row("plain", plain["ppl"], train["plain"]["validation_ppl"]),
        "plain_cache": row(
            "plain",
            plain["ppl_with_cache"],
            best["ppl"],
            window=best["window"],
            theta=best["theta"],
            lam=best["lam"],
            bracket=plain["cache_grid_bracket"],
        ),  # fmt: skip
        "pointer_off": row("pointer", pointer["ppl_pointer_off"], pointer_val["ppl_pointer_off"]),
    }
    curves = {f"{k} LSTM": validation_curve(runs[k] / "log.jsonl") for k in ("plain", "pointer")}
    results.setdefault("runs", {})[tag] = {
        "pointer_over_plain_test": pointer["ppl"] / plain["ppl"],
        "model": model_settings(name, model),
        "training": RECIPES[recipe],
        "clock": clock,
        "revision": git_revision(),
        "command": f"python examples/quality_runs.py --converge --datasets {name} --data DIR"
        + (f" --recipe {recipe}" if recipe != "adamw" else "")
        + (f" --clock {clock}" if clock != "wall" else ""),
        "validation_curves": curves,
    }
    plot_learning_curves(curves, out / f"{tag}_learning_curves.png",
                         f"{TITLES[name]}, 2x200: validation perplexity per epoch")  # fmt: skip
    path.write_text(json.dumps(results, indent=2))
    return results


def block_name(name: str, recipe: str) -> str:
    """results.json's key (and the files' prefix) of a dataset's converged block: the adamw recipe keeps the plain
    dataset name of the runs made before recipes could be chosen."""
    return name if recipe == "adamw" else f"{name}_{recipe}"


def dynamic(out: Path, data: Path | None, name: str, recipe: str = "adamw") -> dict:
    """Dynamic evaluation (and the neural cache on top) of a converged dataset's two models; its rows join the
    dataset's block. Each model is the run this script trained in OUT, or else its shipped folder in pretrained/."""
    path, tag = out / "results.json", block_name(name, recipe)
    results = saved_results(path)
    if tag not in results:
        raise SystemExit(f"--dynamic: {path} has no {tag!r} block; run --converge --datasets {name} first")
    jobs, models = [], {}
    for kind, _ in KINDS:
        run_dir, shipped = out / f"{tag}_{kind}", ROOT / "pretrained" / SHIPPED[name][kind]
        models[kind] = run_dir if (run_dir / "config.json").exists() else shipped
        if not (models[kind] / "config.json").exists():
            raise SystemExit(f"--dynamic: no {name} {kind} model in {run_dir} or {shipped}")
        memo = ["--dynamic_grid_memo", str(out / f"{tag}_{kind}.dynamic_grid.jsonl")]  # a stopped grid resumes
        jobs.append((models[kind], name, out / f"{tag}_{kind}.dynamic.json", [*DYNAMIC, *memo]))
    evals = dict(zip(models, evaluate_all(jobs, data), strict=True))
    block = results[tag]
    flags = " ".join([*data_flags(Path("DIR"), name), *DYNAMIC])
    for kind, ev in evals.items():
        d, best = ev["dynamic"], ev["dynamic_grid_best_on_validation"]
        where = models[kind].relative_to(ROOT) if models[kind].is_relative_to(ROOT) else models[kind]
        run = {"epochs": block[kind]["epochs"], "params": block[kind]["params"],
               "dynamic": {k: d[k] for k in ("lr", "lam", "segment_length", "epsilon", "stats_tokens")},
               "dynamic_bracket": ev["dynamic_grid_bracket"],
               "static_test_ppl_batch_1": d["static_ppl_batch_1"], "dynamic_test_seconds": d["seconds"],
               "eval_minutes": ev["eval_minutes"],
               "command": f"python examples/evaluate.py {where} {flags}"}  # fmt: skip
        # the grid's validation figure covers its first grid_tokens tokens, not the whole split
        block[f"{kind}_dynamic"] = {"test_ppl": ev["ppl_dynamic"], "valid_ppl": best["ppl"],
                                    "valid_tokens": d["grid_tokens"], **run}  # fmt: skip
        # the cache on the adapting model, chosen on its dynamic evaluation of the whole validation split
        block[f"{kind}_dynamic_cache"] = {"test_ppl": ev["ppl_dynamic_with_cache"],
                                          "valid_ppl": ev["dynamic_cache_grid_best_on_validation"]["ppl"], **run,
                                          "cache": ev["dynamic_cache"],
                                          "cache_bracket": ev["dynamic_cache_grid_bracket"]}  # fmt: skip
    path.write_text(json.dumps(results, indent=2))
    return results


def budget(out: Path, data: Path | None, datasets: list[str], minutes: float) -> dict:
    """Each dataset's pair for a fixed wall-clock budget (short-run regime, not convergence)."""
    results = {}
    for name in datasets:
        runs = train_pair(name, out, data, TRAINING, ["--max_train_minutes", str(minutes)])
        res = {k: json.loads((runs[k] / "results.json").read_text()) for k in runs}
        ev = {
            "pointer": evaluate(
                runs["pointer"],
                name,
                data,
                out / f"{name}_pointer.eval.json",
                "--compare",
                str(runs["plain"]),
                "--plots",
                str(out / f"{name}_plots"),
            ),  # fmt: skip
            "plain": evaluate(runs["plain"], name, data, out / f"{name}_plain.eval.json", "--cache_grid"),
        }
        results[name] = {"train": res, "eval": ev}
        (out / "results.json").write_text(json.dumps(results, indent=2))
    lines = [
        "| dataset | model | params | train min | targets seen | valid ppl | test ppl |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        for kind in ("plain", "pointer"):
            t = r["train"][kind]
            test = r["eval"][kind]["ppl"]
            lines.append(f"| {name} | {kind} LSTM | {t['params'] / 1e6:.2f}M | {t['train_minutes']:.1f} | "
                         f"{t['targets_seen'] / 1e6:.2f}M | {t['validation_ppl']:.1f} | {test:.1f} |")  # fmt: skip
        c = r["eval"]["plain"]
        lines.append(f"| {name} | plain LSTM + neural cache ({c['cache']['window']}, θ {c['cache']['theta']}, "
                     f"λ {c['cache']['lam']}) | | | | {c['cache_grid_best_on_validation']['ppl']:.1f} | "
                     f"{c['ppl_with_cache']:.1f} |")  # fmt: skip
        p = r["eval"]["pointer"]
        lines.append(f"| {name} | pointer LSTM, pointer switched off (g = 1) | | | | | {p['ppl_pointer_off']:.1f} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--converge", action="store_true", help="PTB until validation stops improving (not a budget)")
    ap.add_argument("--dynamic", action="store_true", help="dynamic evaluation of converged models (after --converge)")
    ap.add_argument("--minutes", type=float, default=20.0, help="training budget per model (without --converge)")
    ap.add_argument("--data", help="folder with ptb/ and wikitext-2/ text files (default: the Hub datasets)")
    ap.add_argument("--out", help="output folder (default: results/converged or results/quality)")
    ap.add_argument("--datasets", help="ptb, wt2 or both (default: ptb with --converge, both without)")
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="adamw",
                    help="--converge and --dynamic: the training recipe (sgd: SGD 20 + NT-ASGD, batch 20); a recipe "
                    "other than adamw names its files and its results.json block NAME_RECIPE")  # fmt: skip
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="--converge: what train_minutes counts (train.py --clock), over every resumed part; cpu: each "
                    "run's own CPU time, which neither pauses nor a shared machine inflate. A run keeps its first "
                    "clock")  # fmt: skip
    args = ap.parse_args(argv)
    data = Path(args.data) if args.data else None
    if data is not None and not data.is_dir():
        ap.error(f"--data {data} is not a folder")
    out = Path(args.out or ROOT / "results" / ("converged" if args.converge or args.dynamic else "quality"))
    if args.converge and args.dynamic:
        ap.error("--converge and --dynamic are separate steps: run --converge, then --dynamic")
    out.mkdir(parents=True, exist_ok=True)
    names = (args.datasets or ("ptb" if args.converge or args.dynamic else "ptb,wt2")).split(",")
    if unknown := set(names) - set(HUB):
        ap.error(f"--datasets: unknown {sorted(unknown)}; choose from {sorted(HUB)}")
    if not (args.converge or args.dynamic):
        return budget(out, data, names, args.minutes)
    for name in names:
        if args.dynamic:
            results = dynamic(out, data, name, args.recipe)
        else:
            results = converge(out, data, name, args.recipe, args.clock)
        for kind, row in results[block_name(name, args.recipe)].items():
            valid = "      —" if row["valid_ppl"] is None else f"{row['valid_ppl']:7.2f}"
            print(f"{name} {kind:20s} valid {valid}  test {row['test_ppl']:7.2f}")
    return results


if __name__ == "__main__":
    main()
