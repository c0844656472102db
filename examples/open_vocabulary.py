"""The open-vocabulary protocol on WikiText-2 (modeling_pointer_sentinel/spelling.py): a pointer folder gets a speller,
trained on the training split's rare words from the folder's own contexts, and the words outside the K most frequent
are spelled; the text is scored in bits per byte, split by each word's training count.

    python examples/open_vocabulary.py pretrained/wt2-pointer-sentinel-lstm-2x200 --vocab_limit 10000 \\
        --max_train_count 20 --splits valid --output_json results/open_vocabulary/speller_k10000_valid.json
"""

import argparse
import json
import lzma
import math
import sys
from pathlib import Path

from cli import ArgumentParser, check_ranges, non_negative, positive


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a WikiText-2 model folder (its tokenizer and weights)")
    p.add_argument("--vocab_limit", type=int, default=10000, help="K: words ranked K or lower are spelled")
    p.add_argument(
        "--max_train_count", type=int, default=20, help="the speller learns the words seen at most this often"
    )
    p.add_argument("--speller_size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--splits", nargs="+", default=["valid"], choices=["valid", "test"])
    p.add_argument("--chunk", type=int, default=512, help="ids per forward call when scoring")
    p.add_argument("--num_threads", type=int, default=None)
    p.add_argument("--output_json")
    args = p.parse_args(argv)
    check_ranges(p, args, [("--vocab_limit", positive, "positive"), ("--max_train_count", non_negative, ">= 0"),
                           ("--speller_size", positive, "positive"), ("--epochs", positive, "positive"),
                           ("--lr", positive, "positive"), ("--chunk", positive, "positive")])  # fmt: skip
    if not (Path(args.model) / "config.json").is_file():
        p.error(f"{args.model} is not a model folder (no config.json)")
    return args


def main(argv=None):
    args = parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from modeling_pointer_sentinel.spelling import (
        spell_stream,
        spelled_bits_per_byte,
        speller_pairs,
        train_speller,
        with_speller,
        word_spellings,
    )
    from modeling_pointer_sentinel.training import encode_lines

    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(args.model)
    word_model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    V = word_model.config.vocab_size
    if not args.vocab_limit < V:
        sys.exit(f"open_vocabulary.py: error: --vocab_limit must be below the vocabulary's {V} words")
    data = Path(__file__).resolve().parents[1] / "modeling_pointer_sentinel" / "data" / "wikitext-2"
    texts = {s: lzma.open(data / f"wiki.{s}.tokens.xz", "rt", encoding="utf-8").read() for s in ("train", *args.splits)}
    ids = {s: encode_lines(tok, t.splitlines()) for s, t in texts.items()}
    counts = torch.bincount(ids["train"], minlength=V)
    spellings = word_spellings(tok, range(V))
    rare = {
        w for w in range(V) if 0 < counts[w] <= args.max_train_count and w not in (tok.unk_token_id, tok.eos_token_id)
    }
    h, words = speller_pairs(word_model, ids["train"], rare)
    print(f"{len(words):,} training occurrences of {len(rare):,} words seen at most {args.max_train_count} times")
    model = with_speller(word_model, args.speller_size, vocab_limit=args.vocab_limit)
    history = train_speller(model.speller, h, words, spellings, epochs=args.epochs, lr=args.lr)
    model.eval()
    settings = ("model", "vocab_limit", "max_train_count", "speller_size", "epochs", "lr")
    result = {k: getattr(args, k) for k in settings} | {"speller_train_bits_per_symbol": history}
    for split in args.splits:
        stream, owner = spell_stream(ids[split], args.vocab_limit, spellings, V)
        word_bytes = torch.tensor([len(spellings[w]) for w in ids[split].tolist()])  # its bytes and a separator
        figures = spelled_bits_per_byte(model, stream, owner, word_bytes, counts[ids[split]],
                                        len(texts[split].encode()), chunk=args.chunk)  # fmt: skip
        figures["spelled_words"] = int((ids[split] >= args.vocab_limit).sum())
        nats = figures["bits_per_byte"] * figures["bytes"] * math.log(2)
        figures["word_perplexity"] = math.exp(nats / figures["words"])
        result[split] = figures
        print(split, json.dumps(figures, indent=1))
    if args.output_json:
        Path(args.output_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output_json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
