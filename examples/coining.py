r"""How often does a spell-mode model coin a word, and does it use the word again? Samples continuations of each
prompt from a folder with a speller and counts, on the generated ids alone (nothing is decoded to count):

- coined words: spelled words of a continuation (bytes closed by `</w>`) whose spelling neither the vocabulary (a word
  id) nor the prompt holds, each counted once, at its first occurrence;
- of those, the ones that recur later in the same continuation, and of the recurrences, the ones the pointer could
  copy: the word's previous occurrence is within `config.pointer_window` word steps before it (a word step is a
  vocabulary id, `<eos>` included, or a `</w>`).

    python examples/coining.py out/wt2-pointer-speller --prompts_file prompts.txt --samples 20 \
        --max_new_tokens 100 --top_k 40 --seed 0 --output_json coining.json

Each line of --prompts_file is a prompt, continued from a line start; a continuation runs to --max_new_tokens across
line ends, as the window does (a word still being spelled at the end is not counted). Rates are per generated word
(word steps). A model without a pointer copies nothing: its window counts as 0 steps. A folder without a speller
stops the script with one `error:` line and exit status 2, before torch loads.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import (  # noqa: E402
    ArgumentParser,
    check_model_folder,
    check_ranges,
    check_text_file,
    describe_ranges,
    fail,
    load_saved_model,
    saved_config,
)

RANGES = [  # checked by cli.check_ranges and stated in --help
    ("--samples", lambda v: v >= 1, ">= 1"),
    ("--max_new_tokens", lambda v: v >= 1, ">= 1"),
    ("--top_k", lambda v: v >= 0, ">= 0 (0: off)"),
    ("--seed", lambda v: 0 <= v < 2**32, "in [0, 2**32)"),
]
END_OF_WORD, WORD_GOES_ON = 256, 257  # after V: spell mode's bytes at V … V+255, then `</w>`, `<+w>`
EXAMPLES = 10  # coined words shown


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a spell-mode folder (a speller: examples/add_speller.py)")
    p.add_argument("--prompts_file", required=True, help="one prompt a line")
    p.add_argument("--samples", type=int, default=10, help="sampled continuations per prompt")
    p.add_argument("--max_new_tokens", type=int, default=100)
    p.add_argument("--top_k", type=int, default=40)
    p.add_argument("--seed", type=int, default=0, help="set once, before the first prompt's samples")
    p.add_argument("--output_json", help="the counts, rates, examples and each continuation's ids and counts")
    describe_ranges(p, RANGES)
    args = p.parse_args(argv)
    check_ranges(p, args, RANGES)
    check_text_file(p, "--prompts_file", args.prompts_file, decode=True)
    check_model_folder(p, "", args.model)
    config = saved_config(args.model)  # {} where unreadable: loading the folder then says why
    if config and not config.get("speller_size"):  # every count of a folder that cannot spell would be 0
        p.error(f"{args.model} has no speller: it cannot write new words; give it one with examples/add_speller.py")
    return args


def word_steps(ids: list[int], V: int):
    """Each word step of `ids` (spell mode): None for a vocabulary id (or a token added after the spelling ones), the
    spelled word's bytes at its `</w>`. A word still being spelled at the end is no step yet."""
    spelling = bytearray()
    for x in ids:
        s = x - V
        if 0 <= s < END_OF_WORD:
            spelling.append(s)
        elif s == END_OF_WORD:
            yield bytes(spelling)
            spelling = bytearray()
        elif s != WORD_GOES_ON:  # `<+w>` only cuts a long word into pieces
            spelling = bytearray()
            yield None


def count_coined(prompt_ids: list[int], new_ids: list[int], V: int, vocabulary: set[bytes], window: int) -> dict:
    """The counts of one continuation `new_ids` of `prompt_ids`: its word steps, spelled words, coined words (their
    first occurrences; spellings in `coined`), the coined words that recur, their recurrences, and the recurrences
    within `window` word steps after the word's previous occurrence (the pointer's window at the step before holds
    the `window` word steps up to it). `vocabulary`: the UTF-8 spellings of the word ids."""
    held = vocabulary | {w for w in word_steps(prompt_ids, V) if w is not None}
    last, coined, recurring = {}, [], set()
    words = spelled = recurrences = within = 0
    for step, word in enumerate(word_steps(new_ids, V)):
        words += 1
        spelled += word is not None
        if word in last:  # a coined word again
            recurrences += 1
            within += step - last[word] <= window
            recurring.add(word)
            last[word] = step
        elif word is not None and word not in held:
            coined.append(word)
            last[word] = step
    return {"words": words, "spelled_words": spelled, "coined_words": len(coined), "coined_recurring": len(recurring),
            "recurrences": recurrences, "recurrences_within_window": within, "coined": coined}  # fmt: skip


def rate(part: int, whole: int, per: float = 1.0) -> float | None:
    return per * part / whole if whole else None


def shown(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def summary(rows: list[dict]) -> dict:
    """The counts over all continuations, and the rates: coined words per 1,000 generated words, the share of coined
    words that recur, the share of recurrences the pointer's window holds."""
    keys = ("words", "spelled_words", "coined_words", "coined_recurring", "recurrences", "recurrences_within_window")
    total = {k: sum(r[k] for r in rows) for k in keys}
    return total | {
        "coined_per_1000_words": rate(total["coined_words"], total["words"], 1000),
        "share_of_coined_recurring": rate(total["coined_recurring"], total["coined_words"]),
        "share_of_recurrences_within_window": rate(total["recurrences_within_window"], total["recurrences"]),
    }


if __name__ == "__main__":  # a mistaken command line or a folder without a speller fails here, before torch loads
    parse_args()

import torch  # noqa: E402
from transformers import set_seed  # noqa: E402

import modeling_pointer_sentinel  # noqa: E402,F401  (registers the Auto classes)


def main(argv=None):
    args = parse_args(argv)
    tok, model = load_saved_model(args.model)
    cfg, eos = model.config, tok.eos_token_id
    V, L = cfg.vocab_size, cfg.pointer_window if cfg.use_pointer else 0  # no pointer: no recurrence is a copy
    vocabulary = {w.encode() for w in tok.convert_ids_to_tokens(list(range(V)))}
    prompts = [line for line in Path(args.prompts_file).read_text().splitlines() if line.strip()]
    rows = []
    set_seed(args.seed)
    for i, prompt in enumerate(prompts):
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        if not ids:
            fail(f"--prompts_file {args.prompts_file}: line {i + 1} has no words to continue: {prompt!r}")
        ids = torch.tensor([[eos, *ids]])  # a line start, as every training line follows an <eos>
        for j in range(args.samples):  # one row at a time: no padding among the ids counted
            # eos_token_id=None: on past line ends, as the pointer's window goes on
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                 do_sample=True, top_k=args.top_k, eos_token_id=None,
                                 pad_token_id=tok.pad_token_id)  # fmt: skip
            new = out[0, ids.shape[1] :].tolist()
            counts = count_coined(ids[0].tolist(), new, V, vocabulary, L)
            coined = [w.decode("utf-8", errors="replace") for w in counts.pop("coined")]
            rows.append({"prompt": i, "sample": j, **counts, "coined": coined, "ids": new})
    total = summary(rows)
    examples = list(dict.fromkeys(w for r in rows for w in r["coined"]))[:EXAMPLES]
    print(f"{len(rows)} continuations ({len(prompts)} prompts x {args.samples} samples), {total['words']:,} words: "
          f"{total['coined_words']:,} coined ({shown(total['coined_per_1000_words'], '.1f')} per 1,000 words), "
          f"{total['coined_recurring']:,} of them recur ({shown(total['share_of_coined_recurring'], '.0%')}), "
          f"{total['recurrences_within_window']:,} of {total['recurrences']:,} recurrences within the pointer's "
          f"window of {L} ({shown(total['share_of_recurrences_within_window'], '.0%')})")  # fmt: skip
    if examples:
        print("coined, e.g.: " + ", ".join(examples))
    result = {"model": args.model, "prompts": len(prompts), "samples": args.samples,
              "max_new_tokens": args.max_new_tokens, "top_k": args.top_k, "seed": args.seed, "pointer_window": L,
              "continuations": len(rows), **total, "examples": examples, "per_continuation": rows}  # fmt: skip
    if args.output_json:
        Path(args.output_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output_json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return result


if __name__ == "__main__":
    main()
