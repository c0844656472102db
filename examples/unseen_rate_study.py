r"""The rate at which a spelling run's simulation spells rare training words (train.py's --unseen_word_rate), chosen
on validation.

    python examples/unseen_rate_study.py                      # writes results/unseen_rate/{README.md,study.json}

WikiText-2 (the bundled splits, or --data DIR holding wiki.{train,valid,test}.tokens) is written back as raw prose by
the package's own wikitext rules (`Du Fu 's` -> `Du Fu's`; its `<unk>` words are left out: raw text has none). The
training split is cut to its first --train_lines lines, validation and test to their first --eval_lines. For each of
--rates, a small model with a speller (--config) is trained from scratch on the raw text for --steps optimizer steps
(an equal budget; the same seed), and its validation bits per UTF-8 byte read from its results.json. The rule, fixed
before any run: the lowest validation bits per byte, ties (equal at 3 decimals, the table's precision) to the smaller
rate. Only then is the chosen run's model scored on test. A rate whose run finished with the same flags is read
back, not trained again.
"""

import argparse
import json
import lzma
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# 1 x 128, tied, L = 100, the default speller (256 units): small enough for four runs in ~40 CPU-minutes
CONFIG = {
    "model": {"embedding_size": 128, "hidden_size": 128, "num_layers": 1, "tie_word_embeddings": True,
              "pointer_window": 100, "input_dropout": 0.2, "hidden_dropout": 0.2, "output_dropout": 0.2,
              "adaptive_softmax_cutoffs": [2000, 10000]},
    "scheme": "stateful", "bptt": 35, "per_device_train_batch_size": 20, "per_device_eval_batch_size": 10,
    "optimizer": "adamw", "learning_rate": 0.003, "clip": 0.25, "num_train_epochs": 1000, "eval_bptt": 200,
    "log_every": 50,
}  # fmt: skip


def raw_lines(path: Path, limit: int) -> list[str]:
    """The first `limit` lines of a WikiText split (`.tokens` or `.tokens.xz`) as raw prose."""
    from modeling_pointer_sentinel.tokenization import corpus_line_text

    out = []
    with lzma.open(path, "rt") if path.suffix == ".xz" else path.open() as f:
        for line, _ in zip(f, range(limit), strict=False):
            out.append(corpus_line_text([w for w in line.split() if w != "<unk>"]) if line.strip() else "")
    return out


def split_path(data: Path, name: str) -> Path:
    plain = data / f"wiki.{name}.tokens"
    return plain if plain.exists() else plain.with_name(plain.name + ".xz")


def run_train(out: Path, flags: list[str]):
    with (out / "train.log").open("w") as log:
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "train.py"), *flags], stdout=log, stderr=log,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    if done.returncode:
        raise SystemExit(f"train.py failed for {out} (exit status {done.returncode}): see {out / 'train.log'}")


def pick(rows: list[dict]) -> dict:
    """The rule: the lowest validation bits per byte (at 3 decimals), ties to the smaller rate."""
    return min(rows, key=lambda r: (round(r["validation_bits_per_byte"], 3), r["rate"]))


def test_bits_per_byte(folder: Path, lines: list[str], config: dict) -> dict:
    """A trained folder scored on `lines` as train.py scores validation (spelling.text_bits_per_byte)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from modeling_pointer_sentinel.spelling import text_bits_per_byte
    from modeling_pointer_sentinel.training import encode_lines

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = encode_lines(tok, lines)
    batch, bptt = config.get("per_device_eval_batch_size", 10), config.get("eval_bptt", 200)  # train.py's defaults
    return text_bits_per_byte(model, tok, ids, batch, bptt)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", type=float, nargs="+", default=[0.0, 0.1, 0.3, 0.5])
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per run (the equal budget)")
    p.add_argument("--train_lines", type=int, default=4000, help="the training split's first lines (~225k words)")
    p.add_argument("--eval_lines", type=int, default=400, help="validation's and test's first lines (~20k words)")
    p.add_argument("--data", type=Path, default=None, help="a folder of wiki.{train,valid,test}.tokens[.xz]")
    p.add_argument("--config", type=Path, default=None, help="train.py's flags as JSON (default: CONFIG above)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1, help="runs at once (each one thread)")
    p.add_argument("--work_dir", type=Path, default=ROOT / "runs" / "unseen_rate")
    p.add_argument("--output", type=Path, default=ROOT / "results" / "unseen_rate")
    args = p.parse_args(argv)
    if not all(0 <= r <= 1 for r in args.rates):
        p.error(f"--rates must be in [0, 1], got {args.rates}")
    if min(args.steps, args.train_lines, args.eval_lines, args.jobs) < 1:
        p.error("--steps, --train_lines, --eval_lines and --jobs must be positive integers")

    from tqdm.auto import tqdm

    from modeling_pointer_sentinel.training import BUNDLED

    data = args.data or BUNDLED
    config = json.loads(args.config.read_text()) if args.config else CONFIG
    work = args.work_dir
    (work / "data").mkdir(parents=True, exist_ok=True)
    (work / "config.json").write_text(json.dumps(config, indent=1))
    files = {}
    for split, name, limit in (("train", "train", args.train_lines), ("validation", "valid", args.eval_lines),
                               ("test", "test", args.eval_lines)):  # fmt: skip
        files[split] = work / "data" / f"{name}.txt"
        files[split].write_text("\n".join(raw_lines(split_path(data, name), limit)) + "\n")

    pending = []
    for rate in args.rates:
        out = work / f"rate_{rate:g}"
        flags = ["--config", str(work / "config.json"), "--train_file", str(files["train"]), "--validation_file",
                 str(files["validation"]), "--output_dir", str(out), "--data_cache_dir", str(work / "cache"),
                 "--unseen_word_rate", f"{rate:g}", "--max_train_steps", str(args.steps), "--seed", str(args.seed),
                 "--num_threads", "1", "--clock", "cpu"]  # fmt: skip
        same = (out / "flags.json").exists() and json.loads((out / "flags.json").read_text()) == flags
        if not (same and (out / "results.json").exists()):  # no test file: test is read for the chosen rate only
            shutil.rmtree(out, ignore_errors=True)  # a run stopped part-way (no checkpoints): afresh
            out.mkdir(parents=True)
            (out / "flags.json").write_text(json.dumps(flags))
            pending.append((out, flags))
    with ThreadPoolExecutor(args.jobs) as pool:  # one train.py process (one thread) per rate, its output in train.log
        runs = [pool.submit(run_train, out, flags) for out, flags in pending]
        for done in tqdm(as_completed(runs), total=len(runs), desc="rates"):
            done.result()

    rows = []
    for rate in args.rates:
        result = json.loads((work / f"rate_{rate:g}" / "results.json").read_text())
        rows.append({"rate": rate, "validation_bits_per_byte": result["validation_bits_per_byte"],
                     "validation_word_ppl": result["validation_word_ppl"], "validation_ppl": result["validation_ppl"],
                     "cpu_minutes": result["train_minutes"], "targets_seen": result["targets_seen"],
                     "epochs": result["epochs"]})  # fmt: skip
    chosen = pick(rows)
    test = test_bits_per_byte(work / f"rate_{chosen['rate']:g}", files["test"].read_text().splitlines(), config)

    command = shlex.join(["python", "examples/unseen_rate_study.py", *(sys.argv[1:] if argv is None else argv)])
    study = {"command": command, "rule": "lowest validation bits per byte (3 decimals), ties to the smaller rate",
             "steps": args.steps, "train_lines": args.train_lines, "eval_lines": args.eval_lines, "seed": args.seed,
             "config": config, "runs": rows, "chosen_rate": chosen["rate"],
             "test": {"rate": chosen["rate"], **test}}  # fmt: skip
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "study.json").write_text(json.dumps(study, indent=1) + "\n")
    (args.output / "README.md").write_text(readme(study))
    print(f"chosen --unseen_word_rate {chosen['rate']:g}: validation {chosen['validation_bits_per_byte']:.3f} bits "
          f"per byte, test {test['bits_per_byte']:.3f} ({args.output / 'README.md'})")  # fmt: skip
    return study


def readme(study: dict) -> str:
    rows = "\n".join(
        f"| {r['rate']:g}{' (chosen)' if r['rate'] == study['chosen_rate'] else ''} | "
        f"{r['validation_bits_per_byte']:.3f} | {r['validation_word_ppl']:.1f} | {r['validation_ppl']:.1f} | "
        f"{r['targets_seen']:,} | {r['epochs']:.2f} | {r['cpu_minutes']:.1f} |"
        for r in study["runs"]
    )
    test = study["test"]
    about = (
        f"WikiText-2 written back as raw prose (its `<unk>` words left out): training on its first "
        f"{study['train_lines']:,} lines, validation and test on their first {study['eval_lines']:,}. Each rate trains "
        f"a new model with the default 256-unit speller from scratch for {study['steps']} optimizer steps (seed "
        f"{study['seed']}, one thread; an equal number of ids each, so a higher rate, whose spellings lengthen the "
        "text, reads less of it) by train.py with the flags and model fields below; in each block of 1000 tokens, each "
        "training word seen at most 10 times is spelled with the rate's probability. Validation: bits per UTF-8 byte "
        f"of the text, as train.py reports it. The rule, fixed before the runs: {study['rule']}."
    )
    chosen = (
        f"Chosen: **{study['chosen_rate']:g}**, train.py's default --unseen_word_rate for a run that spells (a "
        "speller; 0 without one). Test, scored after choosing and for the chosen run only: "
        f"{test['bits_per_byte']:.3f} bits per byte (new words {test['new']['bits_per_byte']:.3f}, copied "
        f"{test['copy']['bits_per_byte']:.3f}, vocabulary {test['vocabulary']['bits_per_byte']:.3f}), word perplexity "
        f"{test['word_perplexity']:.1f}."
    )
    return f"""# --unseen_word_rate for a run that spells, chosen on validation

`{study["command"]}` (examples/unseen_rate_study.py; every number: study.json)

{textwrap.fill(about, 120)}

```json
{json.dumps(study["config"])}
```

| rate | valid bits/byte | valid word ppl | valid ppl (per id) | ids trained on | epochs | CPU min |
|---|---:|---:|---:|---:|---:|---:|
{rows}

{textwrap.fill(chosen, 120)}
"""


if __name__ == "__main__":
    main()
