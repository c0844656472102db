"""Prompts with names the vocabulary lacks, continued through each folder's own `text-generation` pipeline: which
of a prompt's unseen words come back in the continuation, with greedy decoding, beam search and sampling.

    python examples/unseen_names.py pretrained/wt2-pointer-sentinel-lstm-2x200-oov-pointer \
        pretrained/wt2-pointer-sentinel-lstm-2x200 --output results/open_vocabulary/unseen_names_wt2.json

A prompt's unseen words are those its tokenizer gives placeholders (`enc.oov_words`). Greedy and beam search (4
beams) give one continuation each; sampling (top-k 40) gives --samples continuations from --seed. A word "comes
back" when the continuation holds it as a whole word. No `<unk>` may appear in any continuation (checked).
"""

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROMPTS = [
    "\nZelenskyy met Macron in Kyiv on Monday. Later that day, Zelenskyy told reporters that",
    "\nDr. Okonkwo joined Vantablack Labs in 2019. At Vantablack, Okonkwo",
    "\nThe Quarrington River flows through Esselbrook. In 1850, the town of Esselbrook",
    "\nAfter the match, Ruiz-Tagle thanked the fans of Brankovo. Ruiz-Tagle said that",
]
DECODING = {
    "greedy": dict(do_sample=False),
    "beam": dict(do_sample=False, num_beams=4),
    "sample": dict(do_sample=True, top_k=40),
}


def words_back(unseen: list[str], text: str) -> list[str]:
    """The unseen words that `text` holds as whole words (not inside a longer word)."""
    return [w for w in unseen if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", text)]


def continuations(folder: str, prompts: list[str], max_new_tokens: int, samples: int, seed: int) -> dict:
    import torch
    from transformers import AutoTokenizer, pipeline, set_seed

    generator = pipeline("text-generation", model=folder, trust_remote_code=True, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    rows = []
    for prompt in prompts:
        unseen = tok(prompt).oov_words[0]
        row = {"prompt": prompt, "unseen": unseen}
        for name, kw in DECODING.items():
            set_seed(seed)
            n = samples if kw["do_sample"] else 1
            texts = [out["generated_text"] for out in generator(prompt, max_new_tokens=max_new_tokens,
                                                                  num_return_sequences=n, return_full_text=False,
                                                                  **kw)]  # fmt: skip
            if any("<unk>" in t for t in texts):
                raise SystemExit(f"{folder}: <unk> written in a continuation of {prompt!r}: {texts}")
            back = [words_back(unseen, t) for t in texts]
            row[name] = {"continuations": texts, "unseen_back": back,
                         "with_an_unseen_word": sum(bool(b) for b in back) / len(texts)}  # fmt: skip
        rows.append(row)
    return {"model": Path(folder).name, "max_new_tokens": max_new_tokens, "samples": samples, "seed": seed,
            "prompts": rows}  # fmt: skip


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="saved model folders with oov_slots > 0")
    p.add_argument("--max_new_tokens", type=int, default=20)
    p.add_argument("--samples", type=int, default=10, help="sampled continuations per prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", help="write the results as JSON here")
    args = p.parse_args(argv)
    for flag in ("max_new_tokens", "samples"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be a positive integer, got {getattr(args, flag)}")
    for m in args.models:
        if not Path(m).is_dir():
            p.error(f"{m}: no such folder")
    results = [continuations(m, PROMPTS, args.max_new_tokens, args.samples, args.seed) for m in args.models]
    for r in results:
        for row in r["prompts"]:
            print(f"{r['model']} | {row['prompt']!r} | unseen {row['unseen']}")
            for name in DECODING:
                d = row[name]
                print(f"  {name}: {d['with_an_unseen_word']:.0%} bring one back | {d['continuations'][0]!r}")
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    return results


if __name__ == "__main__":
    sys.exit(main() and 0)
