"""Baselines that spell everything (issue 59, part 7): the plain 2x200 LSTM of examples/quality_runs.py on WikiText-2
read as UTF-8 bytes, or as a byte-level BPE learnt from the training split, trained by examples/train.py and scored
in bits per byte on exactly the bytes the word models count (modeling_pointer_sentinel/baselines.py).

    python examples/baselines.py train byte --output_dir runs/baselines/byte           # again: resumes the run
    python examples/baselines.py train bpe --vocab_size 10000 --output_dir runs/baselines/bpe10000
    python examples/baselines.py score runs/baselines/byte --splits validation test --output_json OUT.json
    python examples/baselines.py curve runs/baselines/byte --output_json OUT.json       # validation per epoch

`train` builds the tokenizer in OUTPUT_DIR/tokenizer (once), writes train.py's config (OUTPUT_DIR/config.json: the
quality runs' model with the pointer off and their AdamW recipe, `--bptt` ids per segment) and runs examples/train.py
with a checkpoint every --checkpointing_steps updates and `--resume_from_checkpoint latest`: the same command goes on
from the newest checkpoint. Flags after `--` go to train.py as they are. `score` reads the finished model
(OUTPUT_DIR/model.safetensors) or, while the run goes on, the newest checkpoint's weights. Data: the bundled
WikiText-2, or --train_file/--validation_file/--test_file (a word-level corpus, one line per line).
"""

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import ArgumentParser, check_ranges, positive  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("byte", "bpe")
SPLITS = {"train": "train", "validation": "valid", "test": "test"}
# One segment of the word models is 35 words, about 200 bytes; a byte model's segment of 100 bytes keeps its updates
# per epoch near the word models' (10.9M bytes against 2.1M words) while its state, carried across segments, sees
# the whole past.
BPTT = {"byte": 100, "bpe": 35}


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train (or resume) a baseline")
    t.add_argument("kind", choices=KINDS)
    t.add_argument("--output_dir", required=True)
    t.add_argument("--vocab_size", type=int, default=10000, help="bpe: ids in all (bytes, line break, merges)")
    t.add_argument("--bptt", type=int, default=None, help="ids per training segment (default: byte 100, bpe 35)")
    t.add_argument("--size", type=int, default=200, help="embedding and hidden units of each of the 2 layers")
    t.add_argument("--checkpointing_steps", type=int, default=200)
    t.add_argument("--num_threads", type=int, default=1)
    s = sub.add_parser("score", help="bits per byte of a baseline (finished, or its newest checkpoint)")
    s.add_argument("run", help="a baseline's --output_dir")
    s.add_argument("--splits", nargs="+", default=["validation"], choices=["validation", "test"])
    s.add_argument("--chunk", type=int, default=2048, help="ids per forward call")
    s.add_argument("--num_threads", type=int, default=1)
    s.add_argument("--output_json")
    c = sub.add_parser("curve", help="a run's validation per epoch, in bits per byte of the validation text")
    c.add_argument("run")
    c.add_argument("--output_json")
    for q in (t, s, c):
        q.add_argument("--train_file")
        q.add_argument("--validation_file")
        q.add_argument("--test_file")
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.train_args = argv[cut + 1 :]
    if args.train_args and args.command != "train":
        p.error("flags after -- go to train.py: only with train")
    ranges = [("--num_threads", positive, "positive"), ("--chunk", positive, "positive"),
              ("--bptt", positive, "positive"), ("--size", positive, "positive"),
              ("--checkpointing_steps", positive, "positive"),
              ("--vocab_size", lambda v: v >= 257, ">= 257 (the 256 bytes and the line break)")]  # fmt: skip
    check_ranges(p, args, [r for r in ranges if hasattr(args, r[0][2:])])
    files = [f for f in (args.train_file, args.validation_file, args.test_file) if f]
    for f in files:
        if not Path(f).is_file():
            p.error(f"{f}: no such file")
    if files and not args.train_file:
        p.error("--validation_file/--test_file need --train_file (the tokenizer and the training counts)")
    if args.command != "train" and not (Path(args.run) / "config.json").is_file():
        p.error(f"{args.run} is not a baseline run (no config.json): run `baselines.py train` first")
    return args


def read_lines(args) -> dict[str, list[str]]:
    """Each split's lines: the files given, or the bundled WikiText-2."""
    import lzma

    if args.train_file:
        given = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
        return {s: Path(f).read_text(encoding="utf-8").splitlines() for s, f in given.items() if f}
    data = ROOT / "modeling_pointer_sentinel" / "data" / "wikitext-2"
    return {s: lzma.open(data / f"wiki.{n}.tokens.xz", "rt", encoding="utf-8").read().splitlines()
            for s, n in SPLITS.items()}  # fmt: skip


def train_config(kind: str, bptt: int, size: int) -> dict:
    """train.py's --config: quality_runs.py's 2x200 model with the pointer off (a full softmax: a few hundred or
    thousand ids) and its --converge recipe, `bptt` ids per segment."""
    from quality_runs import CONVERGE, MODEL

    model = {**MODEL, "embedding_size": size, "hidden_size": size, "use_pointer": False}
    return {"model": model, **CONVERGE, "bptt": bptt, "max_unk_rate": 0.0, "clock": "cpu",
            "_baseline": kind}  # fmt: skip


def train(args):
    from modeling_pointer_sentinel.baselines import bpe_tokenizer, byte_tokenizer

    out = Path(args.output_dir)
    tok_dir = out / "tokenizer"
    if not (tok_dir / "tokenizer.json").is_file():  # built once: a resumed run reads the same ids
        lines = read_lines(args)["train"]
        tok = byte_tokenizer() if args.kind == "byte" else bpe_tokenizer(lines, args.vocab_size)
        tok.save_pretrained(tok_dir)
        print(f"{args.kind} tokenizer of {len(tok)} ids in {tok_dir}")
    cfg = train_config(args.kind, args.bptt or BPTT[args.kind], args.size)
    (out / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    data = [f for flag in ("train_file", "validation_file", "test_file") if getattr(args, flag)
            for f in (f"--{flag}", getattr(args, flag))]  # fmt: skip
    cmd = [sys.executable, str(ROOT / "examples" / "train.py"), "--config", str(out / "config.json"),
           "--tokenizer_name", str(tok_dir), "--output_dir", str(out / "run"), "--num_threads", str(args.num_threads),
           "--checkpointing_steps", str(args.checkpointing_steps), "--checkpoints_total_limit", "1",
           "--resume_from_checkpoint", "latest", "--preprocessing_num_workers", "1", *data,
           *args.train_args]  # fmt: skip
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd)


def load_run(run: Path):
    """The run's model (its final weights, else its newest checkpoint's) and tokenizer, and where the weights came
    from."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from modeling_pointer_sentinel import PointerSentinelForCausalLM
    from modeling_pointer_sentinel.training import config_for_tokenizer

    tok = AutoTokenizer.from_pretrained(run / "tokenizer")
    if (run / "run" / "model.safetensors").is_file():
        return AutoModelForCausalLM.from_pretrained(run / "run", dtype=torch.float32).eval(), tok, "final"
    steps = sorted((p for p in (run / "run").glob("step_*") if p.name[5:].isdigit()), key=lambda p: int(p.name[5:]))
    if not steps:
        sys.exit(f"baselines.py: error: {run / 'run'} holds neither a finished model nor a checkpoint")
    fields = json.loads((run / "config.json").read_text())["model"]
    model = PointerSentinelForCausalLM(config_for_tokenizer(tok, fields))
    state = load_file(steps[-1] / "model.safetensors")
    model.load_state_dict(state, strict=False)  # the tied output matrix is saved once, under the embedding's name
    if model.config.tie_word_embeddings:
        model.tie_weights()
    return model.eval(), tok, str(steps[-1].relative_to(run))


def score(args):
    import torch

    from modeling_pointer_sentinel.baselines import (
        byte_owners,
        corpus_text,
        corpus_words,
        encode_corpus,
        frequency_figures,
        token_nats,
        word_bytes,
        word_nats_of_tokens,
    )

    torch.set_num_threads(args.num_threads)
    run = Path(args.run)
    model, tok, weights = load_run(run)
    lines = read_lines(args)
    train_counts: dict[str, int] = {}
    for w in corpus_words(lines["train"]):
        train_counts[w] = train_counts.get(w, 0) + 1
    result = {"run": str(run), "weights": weights, "ids": len(tok),
              "params": sum(p.numel() for p in model.parameters())}  # fmt: skip
    for split in args.splits:
        ids, owners = encode_corpus(tok, lines[split])
        words = corpus_words(lines[split])
        nats = word_nats_of_tokens(token_nats(model, ids, args.chunk), owners, len(words))
        counts = torch.tensor([train_counts.get(w, 0) for w in words])
        unk = torch.tensor([w == "<unk>" for w in words])
        figures = frequency_figures(nats, word_bytes(words), counts, unk)
        # also over every byte of the text, blank lines' breaks included (less the first word's, its context)
        text_bytes = len(corpus_text(lines[split]).encode()) - int((byte_owners(lines[split]) == 0).sum())
        bits = figures["bits_per_byte"] * figures["bytes"]
        figures |= {"ids": len(ids), "scored_text_bytes": text_bytes, "bits_per_text_byte": bits / text_bytes}
        result[split] = figures
        print(split, json.dumps(figures, indent=1), flush=True)
    if args.output_json:
        Path(args.output_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output_json).write_text(json.dumps(result, indent=1) + "\n")
    return result


def curve(args):
    """Each epoch's validation perplexity per id (train.py's log, all runs of the folder) as bits per byte of the
    validation text: ln(ppl) x ids / bytes, the word models' bytes (about: train.py's streams leave out a few ids)."""
    from transformers import AutoTokenizer

    from modeling_pointer_sentinel.baselines import corpus_words, encode_corpus, word_bytes

    run = Path(args.run)
    tok = AutoTokenizer.from_pretrained(run / "tokenizer")
    lines = read_lines(args)["validation"]
    ids, _ = encode_corpus(tok, lines)
    nbytes = int(word_bytes(corpus_words(lines)).sum())
    points, train, results = [], [], None
    for line in (run / "run" / "log.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "valid_ppl" in rec:
            points.append(
                {
                    "epoch": rec["epoch"] + 1,
                    "step": rec["step"],
                    "valid_ppl_per_id": rec["valid_ppl"],
                    "valid_bits_per_byte": math.log2(rec["valid_ppl"]) * len(ids) / nbytes,
                    "lr": rec["lr"],
                }
            )
        if "train_loss" in rec:  # the running training loss (dropout on), per id
            train.append(
                {"step": rec["step"], "epoch": rec["epoch"] + 1, "train_bits_per_id": rec["train_loss"] / math.log(2)}
            )
        if "stopped" in rec:
            results = rec
    steps = sorted((p for p in (run / "run").glob("step_*") if p.name[5:].isdigit()), key=lambda p: int(p.name[5:]))
    state = json.loads((steps[-1] / "train_state.json").read_text()) if steps else {}
    layout = json.loads((steps[-1] / "checkpoint.json").read_text()).get("layout", {}) if steps else {}
    per_epoch = layout.get("tokens_per_stream")
    out = {"run": str(run), "validation_ids": len(ids), "validation_bytes": nbytes, "curve": points, "train": train,
           "finished": results,
           "newest_checkpoint": steps[-1].name if steps else None,
           "train_cpu_minutes": (results or {}).get("train_minutes", state.get("train_seconds", 0) / 60),
           "epochs": (results or {}).get("epochs", state.get("epoch", 0) + (layout.get("stream_position", 0) / per_epoch
                                                                           if per_epoch else 0)),
           "steps": state.get("step")}  # fmt: skip
    print(json.dumps(out, indent=1))
    if args.output_json:
        Path(args.output_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output_json).write_text(json.dumps(out, indent=1) + "\n")
    return out


def main(argv=None):
    args = parse_args(argv)
    return {"train": train, "score": score, "curve": curve}[args.command](args)


if __name__ == "__main__":
    result = main()
    if isinstance(result, int):
        sys.exit(result)
