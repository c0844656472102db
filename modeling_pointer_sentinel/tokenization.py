"""Word-level tokenizer for PTB / WikiText: words, `<unk>`, and every line break read as `<eos>`.

The corpora are read one line at a time and each line ends in `<eos>` (the word-LM convention). The tokenizer itself
turns each line break into `<eos>`, so `tokenizer(text)` of a multi-line text gives the ids the model was trained on,
and the data code (`training.encode_lines`) reaches its ids through this same rule. `<eos>` decodes to a newline.

Text rules read raw text the way the corpus was written and write natural text back, all as `tokenizers` parts
(normalizers, pre-tokenizers, decoders) saved in tokenizer.json, so every client that loads it gets them:
- "wikitext": punctuation and clitics split off (`company's` -> `company 's`, `don't` -> `don 't`), `@-@`, `@,@` and
  `@.@` for a hyphen between word characters and a comma or point inside a number; decoding joins them back
  (`Du Fu 's poems , 1 @,@ 200` -> `Du Fu's poems, 1,200`).
- "ptb" (Mikolov's PTB): lower case, numbers as `N` (and `%` as `N`: the corpus has `N N` 6,488 times and `percent`
  16), `n't` split off as `do n't`, and the punctuation the corpus dropped dropped.
- "whitespace": words are what whitespace separates (any other tokenized corpus).
Raw text (ordinary prose, whose words carry their punctuation: `is_raw_text`) is read by the wikitext rules.
Text already in the corpus's form reads unchanged: its vocabulary's words that the rules would split (`U.S.`, `<unk>`,
`mr.`) are kept whole, so the training data and its ids stay as they are.
"""

import json
import re
from collections import Counter
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from .tokenization_pointer_sentinel import PointerSentinelTokenizer, placeholder

EOS, UNK = "<eos>", "<unk>"
# The line ends `datasets`' text loader (and Python's universal newlines) cut a file at: a line of the data code is
# the text between two of these.
LINE_BREAK = r"\r\n|[\r\n]"


def _install_line_rule(tk: Tokenizer, rules: str = "whitespace") -> None:
    """Line breaks become ` <eos> ` before the text rules; `<eos>` decodes to a newline."""
    rule = normalizers.Replace(Regex(LINE_BREAK), f" {EOS} ")
    tk.normalizer = rule if tk.normalizer is None else normalizers.Sequence([rule, tk.normalizer])
    tk.decoder = _decoder(rules)


def ends_lines_with_eos(tokenizer) -> bool:
    """Whether the tokenizer itself turns a line break into its eos token (tokenizers built before this rule and
    subword tokenizers do not: the data code then appends eos after each line)."""
    eos = tokenizer.eos_token_id
    return eos is not None and tokenizer.backend_tokenizer.encode("\n", add_special_tokens=False).ids == [eos]


def spelled_line_ids(tokenizer, lines: list[str]) -> list[int]:
    """A spelling tokenizer's ids of lines, each with its line break (its eos): through the tokenizer itself, since
    its backend alone reads a word the vocabulary lacks as `<unk>` (the data code's path for spell mode)."""
    return [i for row in tokenizer([line + "\n" for line in lines], add_special_tokens=False).input_ids for i in row]


def add_line_rule(tokenizer: PreTrainedTokenizerFast) -> PreTrainedTokenizerFast:
    """Give a word-level tokenizer saved before the line-break rule the rule (in place; ids of single lines do not
    change). Tokenizers that already have it are returned as they are."""
    if ends_lines_with_eos(tokenizer):
        return tokenizer
    tk = tokenizer.backend_tokenizer
    if not isinstance(tk.model, models.WordLevel) or tk.token_to_id(EOS) != tokenizer.eos_token_id:
        raise ValueError(f"Only a word-level tokenizer whose eos token is {EOS} can take the line-break rule.")
    _install_line_rule(tk)
    return tokenizer


TEXT_RULES = ("wikitext", "ptb", "whitespace")
# Word pieces, tried in order at each position: WikiText's clitics keep their apostrophe (`'s`, `'t`);
# PTB's `n't` splits off its word (`do n't`) and its hyphenated words stay whole.
# A URL or an e-mail address is one word (one placeholder when the vocabulary lacks it, written back as it was).
_WHOLE = [r"(?:https?://|www\.)\S*[\w/]", r"[\w.+-]+@\w+(?:[.-]\w+)*\.\w+"]
_PIECES = {
    # an apostrophe inside a word opens its next piece (`d'Orsay` -> `d 'Orsay`, as the corpus writes `d 'Or`);
    # `--` between words is one piece (the corpus's `--`)
    "wikitext": [*_WHOLE, r"@[-,.]@", r"'(?:s|t|re|ve|m|ll|d)\b", r"(?<=\w)'\w+", r"-{2,}", r"\w+", r"[^\w\s]"],
    "ptb": [*_WHOLE, r"\w+?(?=n't\b)", r"n't\b", r"'\w+", r"\w+(?:-\w+)*", r"[^\w\s]"],
}
_WIKITEXT_NORMALIZER = [  # <unk> stands for a word or a number the corpus left out
    (r"(?<=\w|<unk>)-(?=\w|<unk>)", " @-@ "),  # a hyphen between words
    (r"(?<=\d|<unk>),(?=<unk>|\d+(?!\w))", " @,@ "),  # a comma inside a number (1,200 but not 1,000th)
    (r"(?<=\d|<unk>)\.(?=\d|<unk>)", " @.@ "),  # a decimal point
]
_PTB_NORMALIZER = [
    (r"(?<![^\s$])N(?!\S)", "0"),  # the corpus's own N (also as decoded, `$N`) survives lower-casing as a number
    ("LOWERCASE", None),
    (r"%", " N "),
    # a number standing alone (PTB writes 1/2 as 1\/2), not part of a word such as 190.58-point or 1980s; a minus sign
    # before it (-5.5) is no part of a word
    (r"(?<![\w.,\\/]|[\w.,\\/]-)(?>\d+(?:(?:[.,:]|\\?/)\d+)*)(?![\w\\/-])", " N "),
]
# Decoding (on the joined text; each rule takes out only the space before a token, so a prefix of the ids decodes to
# a prefix of the text, as streaming and pipelines need).
_CLOSE = r"[,.;:!?%)\]}]|'\w|n't\b|\.\.\."
_DECODE = {
    "wikitext": [(r" @-@(?: |$)", "-"), (r" @,@(?: |$)", ","), (r" @\.@(?: |$)", "."), (f" (?={_CLOSE})", ""),
                 (r"(?<=s) '(?= |$)", "'"), (r"(?<=[(\[{$]) ", ""), (r"(?<==) (?==)", ""), (r"(?<=\n) ", ""),
                 (r"(?<=\d:) (?=\d)", ""),  # a time or a score: 9:30
                 (r"(?<=^ -|[^\d\s] -|[\n(\[{]-) (?=\d)", ""),  # a minus sign: -5.5 (not a dash between numbers, 3 - 2)
                 (r"(?<=\w) (?=--)", ""), (r"(?<=\w--) (?=\w)", "")],  # a--b
    "ptb": [(r" (?='\w|n't\b|'(?: |$))", ""), (r"(?<=\$) ", ""), (r"(?<=\n) ", "")],
    "whitespace": [],
}  # fmt: skip


# A word with punctuation written on to it (`said,` `Shakespeare.` `end."`): raw text, not a tokenized corpus
_ATTACHED = re.compile(r"\w[,.;:!?]+[\"')\]]*$")
RAW_TEXT_SHARE = 0.02  # prose has a comma or a full stop on ~10% of its words; a tokenized corpus only its `U.S.`


def _corpus_form(counts: Counter) -> str | None:
    """The benchmark a tokenized corpus was written like, from its word counts: WikiText's `@-@`, PTB's `N` in
    lower-case text; None for any other."""
    if counts["@-@"] or counts["@,@"]:
        return "wikitext"
    if counts["N"] and not any(w != "N" and w != w.lower() for w in counts):
        return "ptb"
    return None


def is_raw_text(counts: Counter) -> bool:
    """Whether a corpus's whitespace words are raw text (ordinary prose): not in a benchmark's form, and more than
    RAW_TEXT_SHARE of them carry punctuation written on to a word. A tokenized corpus writes its marks apart."""
    if _corpus_form(counts):  # its `mr.` and `U.S.` are words of the corpus
        return False
    words = sum(n for w, n in counts.items() if w != EOS)
    attached = sum(n for w, n in counts.items() if _ATTACHED.search(w))
    return words > 0 and attached > RAW_TEXT_SHARE * words


def detect_text_rules(counts: Counter) -> str:
    """The rule set a corpus was written in, from its word counts (`_corpus_form`); raw text (`is_raw_text`) reads
    by the wikitext rules too, which split punctuation and clitics off its words and join them back in decoding; any
    other corpus is split at whitespace."""
    return _corpus_form(counts) or ("wikitext" if is_raw_text(counts) else "whitespace")


def rule_words(counts: Counter, rules: str) -> Counter:
    """Raw text's word counts as the rule set reads them: each whitespace word cut into its pieces (the rules look no
    further than the whitespace around a word), in first-appearance order, so the vocabulary holds `Shakespeare` and
    `,` rather than `Shakespeare,`."""
    normalizer, cut = _normalizer(rules), _pre_tokenizer(rules, ())
    out = Counter()
    for w, n in counts.items():
        if w == EOS:
            out[w] += n
            continue
        for piece, _ in cut.pre_tokenize_str(normalizer.normalize_str(w) if normalizer else w):
            out[piece] += n
    return out


def _normalizer(rules: str) -> normalizers.Normalizer | None:
    steps = {"wikitext": _WIKITEXT_NORMALIZER, "ptb": _PTB_NORMALIZER}.get(rules, [])
    parts = [normalizers.Lowercase() if p == "LOWERCASE" else normalizers.Replace(Regex(p), c) for p, c in steps]
    return normalizers.Sequence(parts) if parts else None


def _pre_tokenizer(rules: str, vocab: Iterable[str]) -> pre_tokenizers.PreTokenizer:
    """Whitespace, then the rule set's pieces; the vocabulary's words that the pieces would cut stay whole."""
    if rules == "whitespace":
        return pre_tokenizers.WhitespaceSplit()
    pieces = _PIECES[rules]
    cut = pre_tokenizers.Split(Regex("|".join(pieces)), "isolated")
    kept = sorted((w for w in vocab if [p for p, _ in cut.pre_tokenize_str(w)] != [w]), key=lambda w: (-len(w), w))
    # a kept word matches only where it is not the start of a longer word ('l of 'll)
    whole = [f"(?:{'|'.join(re.escape(w) for w in kept)})(?!\\w)"] if kept else []
    steps = [pre_tokenizers.WhitespaceSplit(),
             pre_tokenizers.Split(Regex("|".join([*whole, *pieces])), "isolated")]  # fmt: skip
    if rules == "ptb":  # the punctuation the corpus dropped: pieces of marks only, unless a vocabulary word ($, &)
        marks = "|".join(re.escape(w) for w in sorted(vocab) if not re.search(r"\w", w))
        steps.append(pre_tokenizers.Split(Regex(f"^(?!(?:{marks})$)[^\\w\\s]+$"), "removed"))
    return pre_tokenizers.Sequence(steps)


def _decoder(rules: str) -> decoders.Decoder:
    # Every word decodes with a leading space, so a pipeline's `prompt + decode(new_tokens)` stays spaced; `<eos>`
    # decodes to a line break (no space), so decoded text keeps its lines. The rule set's joins act on the whole text.
    steps = [decoders.Replace(Regex("^"), " "), decoders.Replace(Regex(f"^ {EOS}$"), "\n"), decoders.Fuse()]
    return decoders.Sequence(steps + [decoders.Replace(Regex(p), c) for p, c in _DECODE[rules]])


def corpus_line_text(words: list[str], rules: str = "wikitext") -> str:
    """A line of a corpus in its tokenized form (its words) as the natural text a tokenizer with `rules` decodes it to
    (`add_text_rules`): marks joined to their words, no leading space."""
    if rules not in TEXT_RULES:
        raise ValueError(f"text_rules must be one of {TEXT_RULES}, got {rules!r}")
    return _decoder(rules).decode(list(words)).strip()


def add_text_rules(tokenizer: PreTrainedTokenizerFast, rules: str) -> PreTrainedTokenizerFast:
    """Give a word-level tokenizer a rule set (in place; see the module's docstring), recorded in its config as
    `text_rules`. Text in the corpus's form keeps its ids; the line-break rule is kept or added."""
    if rules not in TEXT_RULES:
        raise ValueError(f"text_rules must be one of {TEXT_RULES}, got {rules!r}")
    tk = tokenizer.backend_tokenizer
    if not isinstance(tk.model, models.WordLevel) or tk.token_to_id(EOS) != tokenizer.eos_token_id:
        raise ValueError(f"Only a word-level tokenizer whose eos token is {EOS} can take text rules.")
    tk.normalizer = _normalizer(rules)
    tk.pre_tokenizer = _pre_tokenizer(rules, tk.get_vocab(with_added_tokens=False))  # words, not placeholders
    _install_line_rule(tk, rules)
    tokenizer.init_kwargs["text_rules"] = rules
    return tokenizer


def build_word_level_tokenizer(
    lines: Iterable[str], max_vocab_size: int | None = None, text_rules: str = "auto", min_frequency: int = 1
) -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer over the whitespace tokens of `lines` plus `<eos>` (once per line) and `<unk>`; of raw
    text (`is_raw_text`, recorded as the tokenizer's `raw_text`) over the pieces its text rules cut those into.

    Ids follow frequency (most frequent first, ties by first appearance), as the word-LM reference readers do.
    `<unk>` is known only to the WordLevel model, not declared as a special token: pipelines drop special tokens
    from generated text, and `<unk>` is an ordinary word in these corpora. `<eos>` doubles as the pad token (PTB and
    WikiText have no pad), and as bos so an empty prompt starts a sentence. Each line break of the text to encode
    (`\\n`, `\\r\\n`, `\\r`) becomes `<eos>`.

    A cap for large corpora: words seen fewer than `min_frequency` times, and the rarest beyond `max_vocab_size` ids
    (`<eos>` and `<unk>` included, always kept), are left out and so read as `<unk>`, which counts their occurrences
    for its place in the frequency order (the adaptive softmax's clusters need the ids in the training text's order).
    """
    if text_rules not in ("auto", *TEXT_RULES):
        raise ValueError(f"text_rules must be one of {TEXT_RULES} or 'auto', got {text_rules!r}")
    if max_vocab_size is not None and max_vocab_size < 2 or min_frequency < 1:
        raise ValueError(f"max_vocab_size must be >= 2 (<eos> and <unk>) and min_frequency >= 1, got "
                         f"{max_vocab_size} and {min_frequency}.")  # fmt: skip
    counts = Counter()
    for line in lines:
        counts.update(line.split())
        counts[EOS] += 1
    if not counts[EOS]:
        raise ValueError("Cannot build a tokenizer from an empty corpus.")
    rules = detect_text_rules(counts) if text_rules == "auto" else text_rules
    raw = is_raw_text(counts)
    if raw and rules != "whitespace":  # raw text: its vocabulary is the words the rules cut it into
        counts = rule_words(counts, rules)
    counts.setdefault(UNK, 0)
    ranked = counts.most_common()  # by count, ties by first appearance
    if max_vocab_size is None and min_frequency == 1:
        words = [w for w, _ in ranked]
    else:
        room, kept, cut = (max_vocab_size or len(ranked)) - 2, [], 0  # room for the words besides <eos> and <unk>
        for w, n in ranked:
            if w in (EOS, UNK) or (n >= min_frequency and len(kept) - (EOS in kept) - (UNK in kept) < room):
                kept.append(w)
            else:
                cut += n
        counts[UNK] += cut
        words = sorted(kept, key=lambda w: -counts[w])  # stable: ties keep their order
    tk = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token=UNK))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token=EOS, pad_token=EOS, bos_token=EOS, padding_side="left"
    )
    tokenizer = add_text_rules(tokenizer, rules)
    tokenizer.init_kwargs["raw_text"] = raw  # saved: train.py gives a tokenizer of raw text a speller by default
    return tokenizer


def open_vocabulary(tokenizer: PreTrainedTokenizerFast, oov_slots: int = 256) -> PointerSentinelTokenizer:
    """The word-level tokenizer as a `PointerSentinelTokenizer`: the same word ids and text rules, `oov_slots`
    placeholders after the words, so each word the vocabulary lacks keeps its identity (tokenization_pointer_sentinel).
    The word ids, and so every id of text in corpus form, are unchanged; a spelling tokenizer's spelling tokens go."""
    if isinstance(tokenizer, PointerSentinelTokenizer) and tokenizer.oov_slots == oov_slots:
        return tokenizer
    tk = tokenizer.backend_tokenizer
    if getattr(tokenizer, "spell_unseen", False):  # the same words, read as placeholders: the spelling tokens go
        state, words = json.loads(tk.to_str()), tk.get_vocab_size(with_added_tokens=False)
        state["added_tokens"] = [t for t in state["added_tokens"] if t["id"] < words]
        if state["decoder"]["type"] == "Sequence" and state["decoder"]["decoders"][-1] == {"type": "ByteFallback"}:
            state["decoder"] = state["decoder"]["decoders"][0]
        tk = Tokenizer.from_str(json.dumps(state))
    if not isinstance(tk.model, models.WordLevel) or tk.token_to_id(EOS) != tokenizer.eos_token_id:
        raise ValueError(f"Only a word-level tokenizer whose eos token is {EOS} can take an open vocabulary.")
    if tk.get_vocab_size(with_added_tokens=True) != tk.get_vocab_size(with_added_tokens=False):
        raise ValueError("The tokenizer already has tokens beyond its words (placeholders of another oov_slots?).")
    rules = {k: tokenizer.init_kwargs[k] for k in ("text_rules",) if k in tokenizer.init_kwargs}
    return PointerSentinelTokenizer(tokenizer_object=tk, eos_token=EOS, pad_token=EOS, bos_token=EOS, unk_token=UNK,
                                    padding_side="left", oov_slots=oov_slots, **rules)  # fmt: skip


def spelling_vocabulary(tokenizer: PreTrainedTokenizerFast) -> PointerSentinelTokenizer:
    """The word-level tokenizer as a `PointerSentinelTokenizer` in spell mode (`spell_unseen=True`): the same word ids
    and text rules, then the byte tokens, `</w>` and `<+w>`, so each word the vocabulary lacks is written in its UTF-8
    bytes (tokenization_pointer_sentinel). An open-vocabulary tokenizer's placeholders are left out. The word ids, and
    so every id of text in corpus form, are unchanged; `tokenizer` itself is not changed (its backend is copied)."""
    if isinstance(tokenizer, PointerSentinelTokenizer) and tokenizer.spell_unseen:
        return tokenizer
    tk = tokenizer.backend_tokenizer
    if not isinstance(tk.model, models.WordLevel) or tk.token_to_id(EOS) != tokenizer.eos_token_id:
        raise ValueError(f"Only a word-level tokenizer whose eos token is {EOS} can spell unseen words.")
    state, words = json.loads(tk.to_str()), tk.get_vocab_size(with_added_tokens=False)
    slots = {placeholder(k) for k in range(getattr(tokenizer, "oov_slots", 0))}
    if any(t["id"] >= words and t["content"] not in slots for t in state["added_tokens"]):
        raise ValueError("The tokenizer has tokens added after its words: spell mode's tokens take ids V … V+257.")
    state["added_tokens"] = [t for t in state["added_tokens"] if t["id"] < words]
    state["truncation"] = state["padding"] = None
    rules = {k: tokenizer.init_kwargs[k] for k in ("text_rules",) if k in tokenizer.init_kwargs}
    return PointerSentinelTokenizer(tokenizer_object=Tokenizer.from_str(json.dumps(state)), eos_token=EOS,
                                    pad_token=EOS, bos_token=EOS, unk_token=UNK, padding_side="left",
                                    spell_unseen=True, **rules)  # fmt: skip
