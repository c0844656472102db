"""Quality runs on a CPU budget: a plain LSTM and a Pointer Sentinel-LSTM of the same size, same tokenizer, data,
schedule and wall-clock budget, on PTB and WikiText-2; then each is evaluated, the plain one also with the neural cache
(parameters chosen on validation), and the two compared by word frequency (paper Figure 4).

    python examples/quality_runs.py --minutes 20 --data ../shared/data --out results/quality

The two models of a dataset train at the same time, one CPU thread each, so they share the machine's load equally.
Results go to OUT/results.json and OUT/results.md; pictures to OUT/<dataset>_plots/.
"""

import argparse
import json
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


def files(data: Path, name: str) -> list[str]:
    if name == "ptb":
        f = {s: data / "ptb" / f"ptb.{s}.txt" for s in ("train", "valid", "test")}
    else:
        f = {s: data / "wikitext-2" / f"wiki.{s}.tokens" for s in ("train", "valid", "test")}
    return ["--train_file", str(f["train"]), "--validation_file", str(f["valid"]), "--test_file", str(f["test"])]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20.0, help="training budget per model")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "results" / "quality"))
    ap.add_argument("--datasets", default="ptb,wt2")
    args = ap.parse_args(argv)
    out, data = Path(args.out), Path(args.data)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in args.datasets.split(","):
        procs, runs = [], {}
        for kind, use_pointer in (("plain", False), ("pointer", True)):
            cfg = {"model": {**MODEL, "use_pointer": use_pointer}, **TRAINING}
            cfg_path = out / f"{name}_{kind}.json"
            cfg_path.write_text(json.dumps(cfg, indent=2))
            run_dir = out / f"{name}_{kind}"
            runs[kind] = run_dir
            cmd = [sys.executable, str(ROOT / "examples" / "train.py"), "--config", str(cfg_path),
                   *files(data, name), "--output_dir", str(run_dir), "--max_train_minutes", str(args.minutes),
                   "--num_threads", "1"]  # fmt: skip
            log = open(out / f"{name}_{kind}.train.log", "w")
            procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), kind))
        for proc, kind in procs:
            if proc.wait() != 0:
                raise SystemExit(f"training {name}/{kind} failed: see {out / f'{name}_{kind}.train.log'}")
        res = {k: json.loads((runs[k] / "results.json").read_text()) for k in runs}
        for kind, run_dir in runs.items():  # keep the logs beside the (ignored) model directories
            shutil.copy(run_dir / "log.jsonl", out / f"{name}_{kind}.log.jsonl")
            shutil.copy(run_dir / "results.json", out / f"{name}_{kind}.results.json")
        # evaluation: test split, batch 10, state carried; the plain model with a cache tuned on validation
        ev = {}
        for kind, extra in (("pointer", ["--compare", str(runs["plain"]), "--plots", str(out / f"{name}_plots")]),
                            ("plain", ["--cache_grid"])):  # fmt: skip
            cmd = [sys.executable, str(ROOT / "examples" / "evaluate.py"), str(runs[kind]), *files(data, name),
                   "--output_json", str(out / f"{name}_{kind}.eval.json"), *extra]  # fmt: skip
            t0 = time.time()
            subprocess.run(
                cmd, check=True, stdout=subprocess.DEVNULL, stderr=open(out / f"{name}_{kind}.eval.log", "w")
            )
            ev[kind] = json.loads((out / f"{name}_{kind}.eval.json").read_text())
            ev[kind]["eval_minutes"] = (time.time() - t0) / 60
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


if __name__ == "__main__":
    main()
