"""Prompts that hold a made-up name and a real one, continued through each folder's own `text-generation` pipeline:
does the continuation bring back the name the vocabulary lacks as often as the name it knows?

    python examples/unseen_names.py pretrained/wt2-pointer-sentinel-lstm-2x200 \
        --output results/open_vocabulary/unseen_names_wt2.json

Each prompt names a made-up word and a real one twice each, in the same roles, the last-named alternating between
them. A prompt's unseen words are those its tokenizer spells or gives placeholders (`tok.unseen_words`); its real
names must be in the vocabulary (both checked). Greedy and beam search (4 beams) give one continuation each; sampling
(top-k 40) gives --samples continuations from --seed. A word "comes back" when the continuation holds it as a whole
word. The summary counts greedy and sampled continuations with an unseen word back and with a real name back. No
`<unk>` may appear in any continuation (checked). A folder whose model has no pointer or no placeholder slots (nothing
could copy an unseen word back) stops the script with one `error:` line and exit status 2.
"""

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import ArgumentParser, check_model_folder, saved_config  # noqa: E402

PROMPTS = [  # (prompt, its real names); its made-up names are the words the tokenizer lacks
    ("\nThe river flows from Esselbrook to London. In 1850, the railway reached Esselbrook and London", ["London"]),
    ("\nDr. Okonkwo and Dr. Smith joined the university in 2019. Smith studied physics, while Okonkwo", ["Smith"]),
    ("\nThe ship Kestrelwind sailed from Boston. The Kestrelwind then sent word to Boston that", ["Boston"]),
    ("\nAfter the match, Brankovo and Chicago shared the points. The coach of Chicago said that Brankovo", ["Chicago"]),
    ("\nThe album Velmora was recorded by Wilson in 1971. Velmora sold well, and Wilson", ["Wilson"]),
    ("\nThe castle of Tarrowby was built by Thomas in 1290. Thomas lived at Tarrowby until", ["Thomas"]),
    ("\nHalvessen was born in Germany in 1901. In 1920 Halvessen left Germany, and", ["Germany"]),
    ("\nThe battle of Drummore was fought near Moscow. Soldiers from Moscow marched to Drummore and", ["Moscow"]),
    ("\nOstravin signed with Johnson in 2004. Ostravin said that Johnson", ["Johnson"]),
    ("\nThe bridge at Peltbridge was designed by Taylor. Taylor began the work at Peltbridge in", ["Taylor"]),
]
DECODING = {
    "greedy": dict(do_sample=False),
    "beam": dict(do_sample=False, num_beams=4),
    "sample": dict(do_sample=True, top_k=40),
}


def words_back(unseen: list[str], text: str) -> list[str]:
    """The words of `unseen` that `text` holds as whole words (not inside a longer word), in any case: PTB's
    tokenizer writes its vocabulary in lower case."""
    return [w for w in unseen if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", text, re.IGNORECASE)]


def names_back(unseen: list[str], real: list[str], texts: list[str]) -> tuple[list, list]:
    """Per continuation, the unseen words it brings back and the real names it brings back."""
    return [words_back(unseen, t) for t in texts], [words_back(real, t) for t in texts]


def continuations(folder: str, prompts: list[tuple[str, list[str]]], max_new_tokens: int, samples: int,
                  seed: int) -> dict:  # fmt: skip
    import torch
    from transformers import AutoTokenizer, pipeline, set_seed

    generator = pipeline("text-generation", model=folder, trust_remote_code=True, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    rows = []
    for prompt, real in prompts:
        unseen = tok.unseen_words(prompt)
        if not unseen or any(tok.unseen_words(name) for name in real):
            raise SystemExit(f"{folder}: {prompt!r} needs an unseen word and real names in the vocabulary {real}")
        row = {"prompt": prompt, "unseen": unseen, "real": real}
        for name, kw in DECODING.items():
            set_seed(seed)
            n = samples if kw["do_sample"] else 1
            texts = [out["generated_text"] for out in generator(prompt, max_new_tokens=max_new_tokens,
                                                                  num_return_sequences=n, return_full_text=False,
                                                                  **kw)]  # fmt: skip
            if any("<unk>" in t for t in texts):
                raise SystemExit(f"{folder}: <unk> written in a continuation of {prompt!r}: {texts}")
            back, real_back = names_back(unseen, real, texts)
            row[name] = {"continuations": texts, "unseen_back": back, "real_back": real_back,
                         "with_an_unseen_word": sum(bool(b) for b in back) / len(texts),
                         "with_a_real_name": sum(bool(b) for b in real_back) / len(texts)}  # fmt: skip
        rows.append(row)
    counted = [(bool(u), bool(r)) for row in rows for k in ("greedy", "sample")
               for u, r in zip(row[k]["unseen_back"], row[k]["real_back"], strict=True)]  # fmt: skip
    summary = {"continuations": len(counted), "with_an_unseen_word": sum(u for u, _ in counted),
               "with_a_real_name": sum(r for _, r in counted)}  # fmt: skip
    return {"model": Path(folder).name, "max_new_tokens": max_new_tokens, "samples": samples, "seed": seed,
            "greedy_and_sampled": summary, "prompts": rows}  # fmt: skip


def check_copies(p, folder: str):
    """The folder's model must be able to copy an unseen word: a pointer (`use_pointer`) and placeholder slots
    (`oov_slots`); else every count would be 0 of N, which reads as a result."""
    config = saved_config(folder)
    if config.get("use_pointer", True) is False:
        twin = Path(folder).with_name(Path(folder).name.replace("-lstm-", "-pointer-sentinel-lstm-", 1))
        named = f"; its pointer twin is {twin}" if twin.name != Path(folder).name and twin.is_dir() else ""
        p.error(f"{folder}: its model has no pointer (use_pointer: false), so nothing can copy an unseen word back; "
                f"give a pointer model's folder{named}")  # fmt: skip
    if not isinstance(slots := config.get("oov_slots", 0), int) or slots < 1:
        p.error(f"{folder}: its model has no placeholder slots (oov_slots: {slots}), so an unseen word is <unk>; "
                "give an open-vocabulary pointer model's folder")  # fmt: skip


def main(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="saved pointer model folders with oov_slots > 0")
    p.add_argument("--max_new_tokens", type=int, default=20)
    p.add_argument("--samples", type=int, default=5, help="sampled continuations per prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", help="write the results as JSON here")
    args = p.parse_args(argv)
    for flag in ("max_new_tokens", "samples"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be a positive integer, got {getattr(args, flag)}")
    for m in args.models:
        check_model_folder(p, "", m)
        check_copies(p, m)
    results = [continuations(m, PROMPTS, args.max_new_tokens, args.samples, args.seed) for m in args.models]
    for r in results:
        for row in r["prompts"]:
            print(f"{r['model']} | {row['prompt']!r} | unseen {row['unseen']}")
            for name in DECODING:
                d = row[name]
                print(f"  {name}: unseen back {d['with_an_unseen_word']:.0%}, real back {d['with_a_real_name']:.0%} | "
                      f"{d['continuations'][0]!r}")  # fmt: skip
        g = r["greedy_and_sampled"]
        print(
            f"{r['model']}: of {g['continuations']} greedy and sampled continuations, {g['with_an_unseen_word']} "
            f"bring an unseen word back and {g['with_a_real_name']} a real name"
        )
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    return results


if __name__ == "__main__":
    sys.exit(main() and 0)
