"""The open-vocabulary protocol on WikiText-2 (modeling_pointer_sentinel/spelling.py): a pointer folder gets a speller,
trained on the training split's rare words from the folder's own contexts, and the words outside the K most frequent
are spelled (their columns leave the softmax: a K-word model); the text is scored in bits per byte, split by each
word's training count (0, 1-100, over 100) and with the corpus's `<unk>` on its own line.

The speller's setting (training words seen at most --max_train_count times, a grid; epochs 1..--epochs, each a
candidate) is chosen on the validation split: the fewest bits per symbol (each byte and the word's end) on its
spelled words, the only words whose probability the speller sets; the validation and, with --test, the test split
given to --score are then scored with that speller.
Bits per byte count each word's UTF-8 bytes and one separator (`<eos>` none), examples/evaluate.py's bytes, and come
from the same code as examples/baselines.py's (modeling_pointer_sentinel/baselines.py): one row, the state carried,
every word after the first a target. --vocab_limit 0 scores the folder as it is (no word spelled).

    python examples/open_vocabulary.py pretrained/wt2-pointer-sentinel-lstm-2x200 --vocab_limit 10000 \\
        --max_train_count 5 20 --epochs 3 --score test --output_json OUT.json
"""

import argparse
import copy
import json
import lzma
import math
import sys
from pathlib import Path

from cli import ArgumentParser, check_ranges, non_negative, positive


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a WikiText-2 model folder (its tokenizer and weights)")
    p.add_argument("--vocab_limit", type=int, default=10000,
                   help="K: words ranked K or lower are spelled (0: none, the folder as it is)")  # fmt: skip
    p.add_argument("--max_train_count", type=int, nargs="+", default=[20],
                   help="the grid: the speller learns the words seen at most this often")  # fmt: skip
    p.add_argument("--speller_size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3, help="each setting's epochs; every epoch is a candidate")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument(
        "--score",
        nargs="+",
        default=["valid"],
        choices=["valid", "test"],
        help="the splits scored in full (bits per byte) with the chosen speller",
    )
    p.add_argument("--chunk", type=int, default=512, help="ids per forward call when scoring")
    p.add_argument("--num_threads", type=int, default=None)
    p.add_argument("--output_json")
    args = p.parse_args(argv)
    check_ranges(p, args, [("--vocab_limit", non_negative, ">= 0"), ("--max_train_count", positive, "positive"),
                           ("--speller_size", positive, "positive"), ("--epochs", positive, "positive"),
                           ("--lr", positive, "positive"), ("--chunk", positive, "positive")])  # fmt: skip
    if not (Path(args.model) / "config.json").is_file():
        p.error(f"{args.model} is not a model folder (no config.json)")
    return args


def main(argv=None):
    args = parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from modeling_pointer_sentinel.baselines import frequency_figures, token_nats, word_nats_of_tokens
    from modeling_pointer_sentinel.spelling import (
        spell_stream,
        speller_bits_per_byte,
        speller_pairs,
        train_speller,
        with_speller,
        without_speller,
        word_spellings,
    )
    from modeling_pointer_sentinel.training import encode_lines

    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    tok = AutoTokenizer.from_pretrained(args.model)
    word_model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    V = word_model.config.vocab_size
    if not args.vocab_limit < V:
        sys.exit(f"open_vocabulary.py: error: --vocab_limit must be below the vocabulary's {V} words")
    data = Path(__file__).resolve().parents[1] / "modeling_pointer_sentinel" / "data" / "wikitext-2"
    splits = tuple(args.score)
    texts = {
        s: lzma.open(data / f"wiki.{s}.tokens.xz", "rt", encoding="utf-8").read() for s in ("train", "valid", *splits)
    }
    ids = {s: encode_lines(tok, t.splitlines()) for s, t in texts.items()}
    counts = torch.bincount(ids["train"], minlength=V)
    spellings = word_spellings(tok, range(V))
    nbytes = torch.tensor([len(s) for s in spellings.values()])  # its bytes and `</w>`: its bytes and a separator
    nbytes[tok.eos_token_id] = 0  # the line break: the separator of the word before it (evaluate.py's word_bytes)
    limit = args.vocab_limit or V

    def score(model, split: str) -> dict:
        stream, owner = spell_stream(ids[split], limit, spellings, V)
        words = ids[split]
        nats = word_nats_of_tokens(token_nats(model, stream, args.chunk), owner, len(words))
        figures = frequency_figures(nats, nbytes[words], counts[words], words == tok.unk_token_id)
        figures["spelled_words"] = int((words >= limit).sum())
        figures["word_perplexity"] = math.exp(nats[~nats.isnan()].mean().item())
        return figures

    settings = ("model", "vocab_limit", "max_train_count", "speller_size", "epochs", "lr")
    result = {k: getattr(args, k) for k in settings}
    result["measure"] = ("bits per byte: each word's UTF-8 bytes and one separator (<eos> none), one row with the "
                         "state carried, every word after the first a target")  # fmt: skip
    if not args.vocab_limit:  # the folder as it is: no word spelled, no speller trained
        result = {"model": args.model, "vocab_limit": 0, "measure": result["measure"]}
        chosen = without_speller(word_model) if word_model.config.speller_size else word_model
    else:
        rare_all = {
            w
            for w in range(V)
            if 0 < counts[w] <= max(args.max_train_count) and w not in (tok.unk_token_id, tok.eos_token_id)
        }
        h_all, words_all = speller_pairs(word_model, ids["train"], rare_all)  # once: each setting takes its share
        # the choice: the speller's bits per symbol on the validation split's spelled words (those ranked K or
        # lower), from the word model's own contexts; only the spelled words' probabilities depend on the speller
        spelled = set(range(args.vocab_limit, V))
        h_valid, words_valid = speller_pairs(word_model, ids["valid"], spelled)
        grid, best = [], None
        for max_count in args.max_train_count:
            keep = counts[words_all] <= max_count
            print(f"{int(keep.sum()):,} training occurrences of words seen at most {max_count} times", flush=True)
            torch.manual_seed(0)
            model = with_speller(word_model, args.speller_size, vocab_limit=args.vocab_limit)

            def after_epoch(epoch, model=model, max_count=max_count):
                nonlocal best
                model.eval()
                bits = speller_bits_per_byte(model.speller, h_valid, words_valid, spellings)
                grid.append({"max_train_count": max_count, "epoch": epoch, "valid_spelled_bits_per_symbol": bits})
                print(f"count <= {max_count}, epoch {epoch}: {bits:.4f} bits per symbol on the validation split's "
                      f"{len(words_valid):,} spelled words", flush=True)  # fmt: skip
                if best is None or bits < best[0]:
                    best = (bits, max_count, epoch, copy.deepcopy(model.speller.state_dict()))
                model.train()

            history = train_speller(model.speller, h_all[keep], words_all[keep], spellings, epochs=args.epochs,
                                    lr=args.lr, after_epoch=after_epoch)  # fmt: skip
            grid[-1]["speller_train_bits_per_symbol"] = history
        _, max_count, epoch, state = best
        chosen = with_speller(word_model, args.speller_size, vocab_limit=args.vocab_limit)
        chosen.speller.load_state_dict(state)
        result |= {
            "grid": grid,
            "chosen": {"max_train_count": max_count, "epoch": epoch},
            "valid_spelled_occurrences": len(words_valid),
        }
    chosen.eval()
    for split in splits:
        result[split] = score(chosen, split)
        print(split, json.dumps(result[split], indent=1), flush=True)
    if args.output_json:
        Path(args.output_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output_json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
