r"""How much free-running text repeats itself: the share of repeated 4-grams in 200-word continuations of validation
prompts, per decoding setting, for a pointer folder and its plain twin, against the same measure on the human text.

    python examples/repetition.py                 # WikiText-2's pair on the bundled validation split
    python examples/repetition.py --pair ptb --validation_file ptb.valid.txt
    python examples/repetition.py --settings greedy topk40 --prompts 10   # a quick look
    python examples/repetition.py --judge runs/baselines/byte            # and a byte model's bits per byte of each

The measure. A continuation is read as words: a vocabulary id is a word, a spelled word (its bytes up to `</w>`) is
one word, `<eos>` (the corpus's line break) is a word, as the corpus reader counts them. Within each continuation,
the share of its 4-gram occurrences (positions 0 ... n-4) whose 4-gram already occurred at an earlier position of the
same continuation; the prompt does not count. The table gives the mean over the prompts, and how many continuations
loop (more than half their 4-grams repeated). The human row is the same measure on the text's next 200 words.

The prompts. The validation split as one word stream (each line's words, then `<eos>`); prompt i ends at word
`P + i * step` (P = --prompt_words, step = what is left after the last continuation, over --prompts): evenly spaced,
no randomness. Each prompt is its P words before that point; the human continuation is the next --words words.

The cost. Mean per-word log p (nats) of what was written, under the folder's own model (its forward's logits, the
pointer and the speller included, no temperature or truncation): greedy writes what the model finds most likely, so
a setting that repeats less writes less likely text. The human continuation's own figure (the model scoring the
real text) is the yardstick: text as likely as real text reads like the corpus to the model; much likelier text is
the repetitive, bland kind (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration", §4).

The copies. A setting must leave the pointer its work: after each of examples/unseen_names.py's 10 prompts (a
made-up name and a real one, each twice), does a 40-word continuation write a made-up name whole again
(`unseen_names.words_back`)? `no_repeat_ngram_size` counts ids, and a spelled name is its bytes: it forbids any 4 ids
the prompt holds, so a name of 4 bytes or more cannot be copied whole.

The choice (`choose`, on these validation prompts): of the settings whose pointer-folder continuations never loop,
repeat 4-grams at most twice as often as the human text and bring a made-up name back in at least half the name
prompts, the one with the highest own log p per word. CHOSEN records it; the shipped generation_config.json files and
the demo's defaults carry it (tests/test_repetition.py).

Sampling draws with seed --seed + the prompt's index, so a row is the same run after run. Each (folder, setting) is
kept in --output_dir as it is done (`runs/`), and a rerun with the same flags reads it back rather than generating
again. Writes --output_dir/{pair}.json and {pair}.md.
"""

import json
import lzma
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import (  # noqa: E402
    ArgumentParser,
    check_model_folder,
    check_ranges,
    check_text_file,
    ctrl_c_stops,
    describe_ranges,
    positive,
)
from unseen_names import PROMPTS as NAME_PROMPTS  # noqa: E402
from unseen_names import words_back  # noqa: E402

NAME_PROMPTS_N = len(NAME_PROMPTS)

BUNDLED_VALID = ROOT / "modeling_pointer_sentinel" / "data" / "wikitext-2" / "wiki.valid.tokens.xz"
PAIRS = {  # (pointer folder, its plain twin)
    "wt2": ("pretrained/wt2-pointer-sentinel-lstm-2x200", "pretrained/wt2-lstm-2x200"),
    "ptb": ("pretrained/ptb-pointer-sentinel-lstm-2x200", "pretrained/ptb-lstm-2x200"),
}
# The decoding settings measured: generate's own arguments (transformers' names), on top of the folder's
# generation_config.json, which each sets in full (do_sample and the warpers' off values), so the folder's own choice
# does not leak into a row.
OFF = dict(do_sample=False, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0, no_repeat_ngram_size=0)
SETTINGS = {
    "greedy": {},
    "greedy_rep1.2": dict(repetition_penalty=1.2),
    "greedy_norep4": dict(no_repeat_ngram_size=4),
    "sample": dict(do_sample=True),
    "topk40": dict(do_sample=True, top_k=40),
    "topk40_t0.8": dict(do_sample=True, top_k=40, temperature=0.8),
    "topp0.9": dict(do_sample=True, top_p=0.9),
    "topp0.9_t0.8": dict(do_sample=True, top_p=0.9, temperature=0.8),
}
N = 4  # the n of the repeated n-grams
LOOP = 0.5  # a continuation loops when more than this share of its 4-grams are repeats
NAME_WORDS = 40  # words written after each of unseen_names.py's prompts
# The rule that picks the shipped setting from the pointer folder's rows (`choose`): no continuation loops, 4-grams
# repeat at most REPEATS times as often as in the human text, and the pointer still copies (a made-up name of the
# prompt comes back whole in at least half of the name prompts); of those, the likeliest text (highest own log p)
REPEATS, COPIES = 2.0, 0.5
CHOSEN = "topk40"  # what `choose` picked from results/repetition/wt2.json; tests/test_repetition.py holds them equal
RANGES = [("--prompts", positive, "a positive integer"), ("--prompt_words", positive, "a positive integer"),
          ("--words", lambda v: v >= N, f"an integer >= {N}"), ("--seed", lambda v: v >= 0, ">= 0"),
          ("--num_threads", positive, "a positive integer")]  # fmt: skip


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--pair", choices=sorted(PAIRS), default="wt2", help="the pointer folder and its plain twin (default: wt2)")
    a("--validation_file", help="the pair's validation text in corpus form (default: the bundled WikiText-2's; "
      "PTB: your copy of ptb.valid.txt)")  # fmt: skip
    a("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS), help="decoding settings to measure")
    a("--prompts", type=int, default=50)
    a("--prompt_words", type=int, default=100, help="words of text before each continuation (the pointer's window)")
    a("--words", type=int, default=200, help="words in each continuation")
    a("--seed", type=int, default=0)
    a("--num_threads", type=int, default=1)
    a("--judge", help="a model of another kind that scores every continuation in bits per byte: an "
      "examples/baselines.py run trained on the pair's training text (e.g. runs/baselines/byte)")  # fmt: skip
    a("--output_dir", default=str(ROOT / "results" / "repetition"))
    describe_ranges(p, RANGES)
    args = p.parse_args(argv)
    check_ranges(p, args, RANGES)
    for folder in PAIRS[args.pair]:
        check_model_folder(p, "--pair", str(ROOT / folder))
    if args.validation_file is None:
        if args.pair != "wt2":
            p.error(f"--pair {args.pair}: give --validation_file (only WikiText-2 is bundled)")
        args.validation_file = str(BUNDLED_VALID)
    check_text_file(p, "--validation_file", args.validation_file)
    return args


# ---- the measure (no torch: tests/test_repetition.py checks it against a slow reference) --------------------------


def repeated_ngram_share(words: list[str], n: int = N) -> float:
    """The share of the n-gram occurrences of `words` (starting at 0 ... len - n) whose n-gram occurred at an earlier
    start; 0.0 for a text shorter than n words."""
    seen, repeats, total = set(), 0, 0
    for i in range(len(words) - n + 1):
        gram = tuple(words[i : i + n])
        repeats += gram in seen
        seen.add(gram)
        total += 1
    return repeats / total if total else 0.0


def corpus_words(path: str | Path) -> list[str]:
    """A corpus file's words, as the word-level reader counts them: each line's words, then `<eos>`."""
    opener = lzma.open if str(path).endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [w for line in f for w in [*line.split(), "<eos>"]]


def choose_prompts(n_words: int, prompts: int, prompt_words: int, words: int) -> list[int]:
    """Where each prompt ends (the index of its continuation's first word), evenly spaced over the text, with room for
    prompt_words before and `words` after each."""
    room = n_words - prompt_words - words
    if room < 0:
        raise ValueError(f"the text has {n_words:,} words: too few for a prompt of {prompt_words} and {words} more")
    step = room // prompts if prompts > 1 else 0
    return [prompt_words + i * step for i in range(prompts)]


# ---- generating and scoring -----------------------------------------------------------------------------------------


def word_ends(ids: list[int], vocab_size: int) -> list[int]:
    """The index of the id that ends each whole word of `ids` (`spelling.word_ends`: a vocabulary id, a spelled word's
    `</w>` or an added token; bytes and `<+w>`, a long word going on, end none)."""
    import numpy as np

    from modeling_pointer_sentinel.spelling import word_ends as ends

    return np.flatnonzero(ends(np.asarray(ids, dtype=np.int64), vocab_size)).tolist()


def words_of(tok, ids: list[int], vocab_size: int) -> list[str]:
    """The words of `ids`, each as its text: a vocabulary word as its token (`<eos>` too), a spelled word as what its
    bytes spell (a spelled word is one word however many ids it takes). Ids after the last whole word are left out."""
    out, start = [], 0
    for e in word_ends(ids, vocab_size):
        piece = ids[start : e + 1]
        if len(piece) == 1 and piece[0] < vocab_size:
            out.append(tok.convert_ids_to_tokens(piece[0]))
        else:  # bytes (and <+w>) up to </w>: the word they spell
            out.append(bytes(t - vocab_size for t in piece if 0 <= t - vocab_size < 256).decode("utf-8", "replace"))
        start = e + 1
    return out


class WordsDone:
    """A stopping criterion: stop a row once its new ids hold `words` whole words (a spelled word's bytes are one)."""

    def __init__(self, prompt_length: int, words: int, vocab_size: int):
        self.start, self.words, self.vocab_size = prompt_length, words, vocab_size

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        from modeling_pointer_sentinel.spelling import word_ends as ends

        done = ends(input_ids[:, self.start :], self.vocab_size).sum(-1) >= self.words
        return done.to(torch.bool)


def token_log_probs(model, ids: list[int]):
    """log p of each id after the first under the model's own forward (its logits: the pointer and speller in)."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].double()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def per_word_log_p(model, ids: list[int], start: int, vocab_size: int) -> list[float]:
    """Each whole word's log p (its ids' log p summed) of ids[start:], read after ids[:start]."""
    lp = token_log_probs(model, ids).tolist()  # lp[i] is ids[i + 1]'s
    out, acc, ends = [], 0.0, set(word_ends(ids, vocab_size))
    for i in range(start, len(ids)):
        acc += lp[i - 1]
        if i in ends:
            out.append(acc)
            acc = 0.0
    return out


def prompt_ids(tok, words: list[str]) -> list[int]:
    """The corpus words as ids, after an `<eos>` (every line of the corpus follows one): each word is a word of the
    vocabulary (the validation split holds no other; a literal `<unk>` is the `<unk>` id)."""
    unk = tok.unk_token_id
    ids = [tok.convert_tokens_to_ids(w) for w in words]
    missing = [w for w, i in zip(words, ids, strict=True) if (i is None or i == unk) and w != "<unk>"]
    if missing:
        raise ValueError(f"words the vocabulary lacks, e.g. {missing[:3]}: is this the folder's own corpus?")
    return [tok.eos_token_id, *ids]


def continue_words(model, ids: list[int], setting: dict, words: int, seed: int) -> list[int]:
    """The prompt's ids and `words` whole words more, by `generate` in `setting` (over OFF: the folder's own
    generation_config.json leaks into no row), sampling from torch.manual_seed(seed)."""
    import torch

    torch.manual_seed(seed)
    kwargs = {**OFF, **setting}  # top_k 0 is off; None would be transformers' default, 50
    V = model.config.vocab_size
    with torch.no_grad():
        return model.generate(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=words * 70,  # a spelled word is at most 64 bytes and its end: the words stop it first
            stopping_criteria=[WordsDone(len(ids), words, V)],
            **kwargs,
        )[0].tolist()


def run_setting(model, tok, prompts, setting: dict, words: int, seed: int, bar) -> list[dict]:
    """One folder, one setting: per prompt its continuation's words, repeated-4-gram share and per-word log p."""
    V, out = model.config.vocab_size, []
    for i, (ids, _) in enumerate(prompts):
        seq = continue_words(model, ids, setting, words, seed + i)
        new = seq[len(ids) :]
        text = words_of(tok, new, V)
        lp = per_word_log_p(model, seq, len(ids), V)
        spelled = sum(len(p) > 1 for p in _pieces(new, V))
        out.append({"prompt": i, "words": text, "repeated_4gram_share": repeated_ngram_share(text),
                    "mean_log_p": statistics.fmean(lp), "spelled_words": spelled, "ids": len(new)})  # fmt: skip
        bar.update(1)
    return out


def _pieces(ids, V):
    pieces, start = [], 0
    for e in word_ends(ids, V):
        pieces.append(ids[start : e + 1])
        start = e + 1
    return pieces


def human_rows(model, tok, prompts, bar) -> list[dict]:
    """The human continuation of each prompt, measured and scored as the models' are."""
    V, out = model.config.vocab_size, []
    for i, (ids, human) in enumerate(prompts):
        tok_ids = prompt_ids(tok, human)[1:]  # no <eos> before: it continues the prompt
        lp = per_word_log_p(model, ids + tok_ids, len(ids), V)
        # the corpus's `<unk>`s in place of spelled words: where the text had a word the vocabulary lacks
        out.append({"prompt": i, "words": human, "repeated_4gram_share": repeated_ngram_share(human),
                    "mean_log_p": statistics.fmean(lp), "spelled_words": human.count("<unk>"),
                    "ids": len(tok_ids)})  # fmt: skip
        bar.update(1)
    return out


def names_back(model, tok, setting: dict, seed: int) -> list[bool]:
    """Per prompt of examples/unseen_names.py (a made-up name and a real one, each twice): whether a NAME_WORDS-word
    continuation in `setting` writes a made-up name of the prompt whole again (what the pointer is for)."""
    out = []
    for i, (prompt, _) in enumerate(NAME_PROMPTS):
        ids = tok(prompt)["input_ids"]
        seq = continue_words(model, ids, setting, NAME_WORDS, seed + i)
        text = tok.decode(seq)[len(tok.decode(ids)) :]
        out.append(bool(words_back(tok.unseen_words(prompt), text)))
    return out


def judge_bits_per_byte(judge, judge_tok, texts, rows: list[dict]) -> float:
    """Bits per byte of the continuations in `rows` (each after its prompt in `texts`, read as context) under
    `judge`, a model of another kind that spells every word (`--judge`): a third party's view of how natural each
    folder's text is, which neither folder's own log p gives. Bytes as modeling_pointer_sentinel/baselines.py counts
    them for the word models (each word's UTF-8 bytes and one separator); over all the continuations."""
    import math

    from modeling_pointer_sentinel.baselines import corpus_words as words_of_lines
    from modeling_pointer_sentinel.baselines import encode_corpus, token_nats, word_bytes, word_nats_of_tokens

    bits = n_bytes = 0.0
    for r in rows:
        prompt, words = texts[r["prompt"]][0], list(r["words"])
        lines, line = [], []
        for w in [*prompt, *words]:  # the corpus's lines: `words_of_lines` gives these words back
            if w == "<eos>":
                lines.append(" ".join(line))
                line = []
            else:
                line.append(w)
        lines.append(" ".join(line))
        ids, owners = encode_corpus(judge_tok, lines)
        all_words = words_of_lines(lines)
        nats = word_nats_of_tokens(token_nats(judge, ids, progress=False), owners, len(all_words))
        new = slice(len(prompt), len(all_words))  # the continuation (and the line end added after it: no bytes)
        bits += nats[new].sum().item() / math.log(2)
        n_bytes += word_bytes(all_words)[new].sum().item()
    return bits / n_bytes


def choose(rows: dict, human: dict) -> str | None:
    """The shipped setting from the pointer folder's rows (`summary`s by setting name): of those that never loop,
    repeat 4-grams at most REPEATS times as often as the human text and bring a made-up name back in at least COPIES
    of the name prompts, the one with the highest own log p per word; None if none qualifies."""
    fit = [name for name, s in rows.items() if s["looping_continuations"] == 0
           and s["repeated_4gram_share_mean"] <= REPEATS * human["repeated_4gram_share_mean"]
           and s["names_back"] >= COPIES * s["name_prompts"]]  # fmt: skip
    return max(fit, key=lambda name: rows[name]["mean_log_p_per_word"], default=None)


def summary(rows: list[dict]) -> dict:
    shares = [r["repeated_4gram_share"] for r in rows]
    return {
        "repeated_4gram_share_mean": statistics.fmean(shares),
        "repeated_4gram_share_median": statistics.median(shares),
        "looping_continuations": sum(s > LOOP for s in shares),
        "mean_log_p_per_word": statistics.fmean(r["mean_log_p"] for r in rows),
        "spelled_words_per_continuation": statistics.fmean(r["spelled_words"] for r in rows),
        "continuations": len(rows),
    }


def markdown(result: dict) -> str:
    a, judge = result["args"], "judge" in result
    command = f"python examples/repetition.py --pair {result['pair']}"
    command += f" --validation_file {a['validation_file']}" if result["pair"] != "wt2" else ""
    command += f" --settings {' '.join(a['settings'])}" if a["settings"] != list(SETTINGS) else ""
    command += f" --judge runs/baselines/{result['judge']['run']}" if judge else ""
    lines = [
        f"Repeated 4-grams in {a['words']}-word continuations of {a['prompts']} {result['pair']} validation prompts "
        f"({a['prompt_words']} words each), `{command}`: within each "
        "continuation, the share of 4-gram occurrences whose 4-gram occurred earlier in it (words: a spelled word is "
        "one, `<eos>` is one); mean over the prompts; loops: continuations with more than half repeated. log p: the "
        "folder's own mean per-word log p (nats) of the text written (human: of the real next words). spelled: words "
        f"the vocabulary lacks, written in bytes. names back: of examples/unseen_names.py's {NAME_PROMPTS_N} prompts, "
        f"those whose {NAME_WORDS}-word continuation writes a made-up name of the prompt whole again."
        + (
            f" judge: bits per byte of the continuations (prompt as context) under `{result['judge']['run']}` "
            f"({result['judge']['weights']}), an examples/baselines.py model that spells every word, `--judge`; "
            "human: of the real text, whose `<unk>`s it reads as written."
            if judge
            else ""
        ),
        "",
        "| folder | setting | repeated 4-grams | loops | log p / word | spelled words / 200 | names back |"
        + (" judge bits/byte |" if judge else ""),
        "|---|---|---:|---:|---:|---:|---:|" + ("---:|" if judge else ""),
    ]
    for folder, rows in result["rows"].items():
        for name, s in rows.items():
            lines.append(
                f"| {Path(folder).name} | {name} | {s['repeated_4gram_share_mean']:.1%} | "
                f"{s['looping_continuations']}/{s['continuations']} | {s['mean_log_p_per_word']:.2f} | "
                f"{s['spelled_words_per_continuation'] * 200 / a['words']:.1f} | "
                f"{s['names_back']}/{s['name_prompts']} |" + (f" {s['judge_bits_per_byte']:.3f} |" if judge else "")
            )
    h = result["human"]
    lines.append(f"| human | the text's next {a['words']} words | {h['repeated_4gram_share_mean']:.1%} | "
                 f"{h['looping_continuations']}/{h['continuations']} | pointer {h['mean_log_p_per_word']:.2f}, "
                 f"plain {result['human_plain']['mean_log_p_per_word']:.2f} | "
                 f"`<unk>`: {h['spelled_words_per_continuation'] * 200 / a['words']:.1f} | — |"
                 + (f" {h['judge_bits_per_byte']:.3f} |" if judge else ""))  # fmt: skip
    lines += ["", f"Chosen: **{result['chosen']}** ({result['rule']}).", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.num_threads)
    out_dir = Path(args.output_dir)
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    words = corpus_words(args.validation_file)
    ends = choose_prompts(len(words), args.prompts, args.prompt_words, args.words)
    texts = [(words[e - args.prompt_words : e], words[e : e + args.words]) for e in ends]
    kept = {k: v for k, v in vars(args).items() if k != "output_dir"}  # no path of this machine
    kept["validation_file"] = Path(args.validation_file).name
    kept["judge"] = args.judge and Path(args.judge).name
    result = {"pair": args.pair, "args": kept,
              "prompt_ends": ends, "rows": {}, "settings": {s: SETTINGS[s] for s in args.settings}}  # fmt: skip
    folders = PAIRS[args.pair]
    run_key = f"n{args.prompts}.p{args.prompt_words}.w{args.words}.s{args.seed}.{Path(args.validation_file).name}"
    judged = lambda rows: {}  # noqa: E731
    if args.judge:  # every continuation scored again by it as it is read (seconds a setting)
        from baselines import load_run

        judge, judge_tok, weights = load_run(Path(args.judge))
        result["judge"] = {"run": Path(args.judge).name, "weights": weights}
        judged = lambda rows: {"judge_bits_per_byte": judge_bits_per_byte(judge, judge_tok, texts, rows)}  # noqa: E731
    bar = tqdm(total=len(folders) * (len(args.settings) + 1) * len(texts), desc="continuations", unit="text")
    for folder in folders:
        model = AutoModelForCausalLM.from_pretrained(ROOT / folder, trust_remote_code=True, dtype=torch.float32)
        model.eval()
        tok = AutoTokenizer.from_pretrained(ROOT / folder, trust_remote_code=True)
        prompts = [(prompt_ids(tok, p), h) for p, h in texts]
        cached = out_dir / "runs" / f"{Path(folder).name}.human.{run_key}.json"
        if not cached.is_file():
            cached.write_text(json.dumps(human_rows(model, tok, prompts, bar)))
        else:
            bar.update(len(prompts))
        human = json.loads(cached.read_text())
        if folder == folders[0]:
            result["human"] = summary(human) | judged(human)
        else:
            result["human_plain"] = summary(human)
        result.setdefault("human_rows", [{k: r[k] for k in ("prompt", "repeated_4gram_share")} for r in human])
        result["rows"][folder] = {}
        for name in args.settings:
            cached = out_dir / "runs" / f"{Path(folder).name}.{name}.{run_key}.json"
            if cached.is_file():
                rows = json.loads(cached.read_text())
                bar.update(len(rows))
            else:
                t0 = time.perf_counter()
                rows = run_setting(model, tok, prompts, SETTINGS[name], args.words, args.seed, bar)
                for r in rows:
                    r["seconds"] = (time.perf_counter() - t0) / len(rows)
                cached.write_text(json.dumps(rows))
            names = out_dir / "runs" / f"{Path(folder).name}.{name}.names{NAME_WORDS}.s{args.seed}.json"
            if not names.is_file():
                names.write_text(json.dumps(names_back(model, tok, SETTINGS[name], args.seed)))
            back = json.loads(names.read_text())
            result["rows"][folder][name] = summary(rows) | {"names_back": sum(back), "name_prompts": len(back)}
            result["rows"][folder][name] |= judged(rows)
            result["rows"][folder][name]["examples"] = [" ".join(r["words"][:60]) for r in rows[:3]]
    bar.close()
    result["human"]["examples"] = [" ".join(h[:60]) for _, h in texts[:3]]
    result["rule"] = (
        f"of the settings whose pointer-folder continuations never loop, repeat 4-grams at most {REPEATS:g} times as "
        f"often as the human text and bring a made-up name back in at least {COPIES:.0%} of the name prompts: the "
        "highest own log p per word"
    )
    result["chosen"] = choose(result["rows"][folders[0]], result["human"])
    stem = out_dir / args.pair
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    table = markdown(result)
    stem.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    with ctrl_c_stops():
        main()
