"""The renamed-names benchmark: can the model produce a name it has only seen in the text?

    python examples/renamed_names.py pretrained/wt2-pointer-sentinel-lstm-2x200 pretrained/wt2-lstm-2x200
    python examples/renamed_names.py pretrained/ptb-pointer-sentinel-lstm-2x200 --dataset ptb --data DIR --split test

`--split` (default validation, where recipe choices are made; test to report) picks the split's documents:
- WikiText-2 (`--dataset wt2`, bundled): each article (a level-1 heading starts one). A *name* is a capitalised word
  of the vocabulary whose lower-case form is not in it, seen twice or more in the article.
- PTB (`--dataset ptb`; `--data DIR` holds ptb.train.txt and ptb.valid.txt / ptb.test.txt, not bundled): PTB is lower
  case, without articles, so a *document* is a segment of 100 consecutive lines of the split (the last one shorter),
  and a *name* is a lower-case alphabetic vocabulary word seen at most 100 times in ptb.train.txt (90% of WikiText-2's
  names are that rare there; `<unk>` and `N` are never names) and twice or more in the segment.
Each document is scored twice. In the renamed copy each name is written as a made-up word the vocabulary lacks
(`made_up_words`: letters, none in the vocabulary; capitalised for WikiText-2). A folder with a speller spells it, as
its tokenizer does, so the name's ids are its bytes and `</w>`; an older folder gives it a placeholder id (slot k for
the document's k-th name, exactly what its tokenizer writes). The choice is deterministic: no sampling anywhere.
At each later occurrence of a name (not its first), with the document before it as context:
- top-1: greedy decoding (`<unk>` suppressed, as generation does) writes the whole name: its one id, or each of its
  spelled ids in turn;
- log p: the model's log-probability of it (of all its spelled ids). A name the window no longer holds is spelled
  anew (a placeholder: scored as `<unk>`'s "new word", the class, not the word), so the figures are also given for
  the positions whose previous occurrence is in the pointer's window, where the pointer can copy it.
Each figure comes with renamed minus real, case by case, and its standard error: both copies score the same
positions, so the paired error is the one that says whether a gap is more than the sample's noise.
The plain LSTM cannot copy: it spells a renamed name anew at each occurrence (a placeholder: its share of `<unk>`'s
new-word mass), so its top-1 is near 0.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SEGMENT_LINES = 100  # PTB: a document is this many consecutive lines of the split
PTB_MAX_COUNT = 100  # PTB: a name is seen at most this many times in the training split
PTB_FILES = {"train": "ptb.train.txt", "validation": "ptb.valid.txt", "test": "ptb.test.txt"}


def names(ids: list[int], vocab: dict[str, int]) -> list[int]:
    """The article's names' ids, in order of first occurrence."""
    words = {i: w for w, i in vocab.items()}
    counts: dict[int, int] = {}
    for i in ids:
        counts[i] = counts.get(i, 0) + 1
    found = []
    for i in dict.fromkeys(ids):
        w = words[i]
        if counts[i] >= 2 and w.isalpha() and w[0].isupper() and w[1:].islower() and w.lower() not in vocab:
            found.append(i)
    return found


def rare_words(ids: list[int], vocab: dict[str, int], train_counts: dict[str, int], max_count: int = PTB_MAX_COUNT):
    """The PTB segment's names' ids, in order of first occurrence: lower-case alphabetic vocabulary words seen at most
    `max_count` times in the training split (`train_counts`, word -> count) and twice or more in `ids`."""
    words = {i: w for w, i in vocab.items()}
    counts: dict[int, int] = {}
    for i in ids:
        counts[i] = counts.get(i, 0) + 1
    return [i for i in dict.fromkeys(ids) if counts[i] >= 2 and words[i].isalpha() and words[i].islower()
            and train_counts.get(words[i], 0) <= max_count]  # fmt: skip


def made_up_words(n: int, vocab, seed: int = 0) -> list[str]:
    """`n` distinct made-up lower-case words (three consonant-vowel syllables), none in `vocab`: words the tokenizer
    gives placeholder ids. Deterministic."""
    import random

    rng, found = random.Random(seed), {}
    while len(found) < n:
        w = "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))
        if w not in vocab and w.capitalize() not in vocab:
            found[w] = None
    return list(found)


def documents(dataset: str, split: str, data: str | None = None) -> list[str]:
    """The split's documents as text (line breaks kept): WikiText-2's articles, or PTB's segments of SEGMENT_LINES
    lines (read from `data`)."""
    if dataset == "wt2":
        sys.path.insert(0, str(ROOT / "examples"))
        from lm_eval_wikitext import articles

        from modeling_pointer_sentinel.training import BUNDLED

        return articles(BUNDLED / f"wiki.{'valid' if split == 'validation' else 'test'}.tokens.xz")
    lines = (Path(data) / PTB_FILES[split]).read_text().splitlines(keepends=True)
    return ["".join(lines[s : s + SEGMENT_LINES]) for s in range(0, len(lines), SEGMENT_LINES)]


def training_counts(data: str) -> dict[str, int]:
    """Each word's count in PTB's training split (`data`/ptb.train.txt)."""
    from collections import Counter

    return dict(Counter((Path(data) / PTB_FILES["train"]).read_text().split()))


def score(model, ids, spans, unk: int, chunk: int = 512):
    """For each span (positions t, each predicted from t - 1: a word's one id, or a spelled word's bytes and `</w>`),
    log p of its ids and whether greedy decoding writes them all (each the greedy choice after the ones before)."""
    import torch

    from modeling_pointer_sentinel import PointerSentinelCache

    x = torch.tensor([ids])
    cache, logp, top = PointerSentinelCache(), {}, {}
    wanted = {t for span in spans for t in span}
    with torch.no_grad():
        for s in range(0, len(ids) - 1, chunk):
            e = min(s + chunk, len(ids) - 1)
            here = [t for t in range(s + 1, e + 1) if t in wanted]  # the mixture over V + N only where it is read
            keep = torch.tensor([t - 1 - s for t in here]) if here else 1
            out = model(x[:, s:e], shift_labels=x[:, s + 1 : e + 1], past_key_values=cache, use_cache=True,
                        logits_to_keep=keep)  # fmt: skip
            for j, t in enumerate(here):
                logits = out.logits[0, j].clone()
                logits[unk] = -torch.inf
                logp[t] = out.target_log_probs[0, t - 1 - s].item()
                top[t] = int(logits.argmax()) == ids[t]
    return [sum(logp[t] for t in span) for span in spans], [all(top[t] for t in span) for span in spans]


def evaluate(folder: str, docs: list[str], limit: int | None = None, train_counts: dict | None = None) -> dict:
    """The benchmark on `docs` for one folder: WikiText-2's names, or with `train_counts` (PTB's training counts) the
    PTB names (`rare_words`)."""
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    cfg = model.config
    if not cfg.oov_slots:
        raise SystemExit(f"{folder}: config.oov_slots is 0, so the model has no placeholders to copy")
    vocab = tok.backend_tokenizer.get_vocab()
    made_up = made_up_words(cfg.oov_slots, vocab)
    for w in made_up:  # the renamed text's words: the vocabulary lacks them
        assert tok.backend_tokenizer.encode(w, add_special_tokens=False).ids == [cfg.unk_token_id], w
    if cfg.speller_size:  # spelled as the tokenizer writes them: WikiText-2's names capitalised, PTB's lower case
        made_up = [tok(w if train_counts else w.capitalize(), add_special_tokens=False)["input_ids"] for w in made_up]
    rows = {"real": ([], []), "renamed": ([], [])}
    near = []  # whether the name's previous occurrence is in the pointer's window (a placeholder it can copy)
    for doc in tqdm(docs[:limit] if limit else docs, desc=Path(folder).name, unit="article"):
        ids = tok.backend_tokenizer.encode(doc, add_special_tokens=False).ids  # corpus form: closed vocabulary
        found = (names(ids, vocab) if train_counts is None else rare_words(ids, vocab, train_counts))[: cfg.oov_slots]
        if not found:
            continue
        # each name's renamed ids: its slot, or its made-up word spelled; `at`: where each word's ids start
        slot = {i: made_up[k] if cfg.speller_size else [cfg.vocab_size + k] for k, i in enumerate(found)}
        pieces = [slot.get(i, [i]) for i in ids]
        at = [0]
        for piece in pieces:
            at.append(at[-1] + len(piece))
        renamed = [j for piece in pieces for j in piece]
        last, positions = {}, []
        for t, i in enumerate(ids):
            if i in slot:
                if i in last:
                    positions.append(t)
                    near.append(t - last[i] <= cfg.pointer_window)  # the window ends at t - 1, L positions long
                last[i] = t
        spans = {"real": [[t] for t in positions], "renamed": [list(range(at[t], at[t + 1])) for t in positions]}
        for name, seq in (("real", ids), ("renamed", renamed)):
            lp, top = score(model, seq, spans[name], cfg.unk_token_id)
            rows[name][0].extend(lp)
            rows[name][1].extend(top)
    result = {"model": Path(folder).name, "cases": len(near), "in_window": sum(near)}
    for part, keep in (("all", [True] * len(near)), ("in_window", near)):
        kept = {name: [[v for v, k in zip(values, keep, strict=True) if k] for values in both]
                for name, both in rows.items()}  # fmt: skip
        for name, (k_lp, k_top) in kept.items():
            result.setdefault(name, {})[part] = {"top1": sum(k_top) / len(k_top), "mean_log_p": sum(k_lp) / len(k_lp)}
        (real_lp, real_top), (renamed_lp, renamed_top) = kept["real"], kept["renamed"]
        result.setdefault("renamed_minus_real", {})[part] = {
            "top1": paired_difference(renamed_top, real_top),
            "mean_log_p": paired_difference(renamed_lp, real_lp),
        }
    return result


def paired_difference(a: list[float], b: list[float]) -> dict:
    """The mean of a - b over paired cases (the same position scored twice) and its standard error, sd / sqrt(n) of
    the per-case differences: the renamed and real copies of a document share their hard cases, so the pairing
    gives a much smaller error than the two means' own."""
    d = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    n = len(d)
    mean = sum(d) / n
    se = (sum((x - mean) ** 2 for x in d) / (n - 1) / n) ** 0.5 if n > 1 else None  # JSON has no NaN
    return {"mean": mean, "se": se, "n": n}


def paired(diff: dict, spec: str) -> str:
    """A paired difference as the summary prints it: the mean, signed, ± its standard error (where n > 1)."""
    se = "" if diff["se"] is None else f" ± {format(diff['se'], spec)}"
    return format(diff["mean"], "+" + spec) + se


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="saved model folders with oov_slots > 0")
    p.add_argument(
        "--split",
        choices=("validation", "test"),
        default="validation",
        help="the split's documents (default: validation, where choices are made)",
    )
    p.add_argument("--dataset", choices=("wt2", "ptb"), default="wt2", help="WikiText-2 (bundled) or PTB (--data)")
    p.add_argument("--data", help="PTB: the folder with ptb.train.txt and ptb.valid.txt / ptb.test.txt")
    p.add_argument("--num_threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--limit", type=int, help="the first N documents only")
    p.add_argument("--output", help="write the results as JSON here")
    return p


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error(f"--limit must be a positive integer, got {args.limit}")
    if args.num_threads < 1:
        p.error(f"--num_threads must be a positive integer, got {args.num_threads}")
    for m in args.models:
        if not Path(m).is_dir():
            p.error(f"{m}: no such folder")
    if args.dataset == "ptb":
        if not args.data:
            p.error("--dataset ptb needs --data DIR (PTB's text is not bundled)")
        for name in (PTB_FILES["train"], PTB_FILES[args.split]):
            if not (Path(args.data) / name).is_file():
                p.error(f"--data {args.data}: no {name} there")
    elif args.data:
        p.error("--data is for --dataset ptb (WikiText-2 is bundled)")
    import torch

    torch.set_num_threads(args.num_threads)
    docs = documents(args.dataset, args.split, args.data)
    counts = training_counts(args.data) if args.dataset == "ptb" else None
    results = [{"dataset": args.dataset, "split": args.split, **evaluate(m, docs, args.limit, counts)}
               for m in args.models]  # fmt: skip
    print(f"{args.dataset} {args.split}:")
    print("| model | positions | real: top-1 | real: mean log p | renamed: top-1 | renamed: mean log p "
          "| renamed - real: top-1 | renamed - real: log p |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        for part, label in (("all", "all"), ("in_window", "previous occurrence in the window")):
            real, renamed, diff = r["real"][part], r["renamed"][part], r["renamed_minus_real"][part]
            n = r["cases"] if part == "all" else r["in_window"]
            print(
                f"| {r['model']} | {label}: {n} | {real['top1']:.1%} | {real['mean_log_p']:.2f} | "
                f"{renamed['top1']:.1%} | {renamed['mean_log_p']:.2f} | {paired(diff['top1'], '.1%')} | "
                f"{paired(diff['mean_log_p'], '.3f')} |"
            )
    print("(± one standard error of the paired difference)")
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
