"""Word-level tokenizer for PTB / WikiText: whitespace tokens, `<unk>`, and every line break read as `<eos>`.

The corpora are read one line at a time and each line ends in `<eos>` (the word-LM convention). The tokenizer itself
turns each line break into `<eos>`, so `tokenizer(text)` of a multi-line text gives the ids the model was trained on,
and the data code (`training.encode_lines`) reaches its ids through this same rule. `<eos>` decodes to a newline.
"""

from collections import Counter
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

EOS, UNK = "<eos>", "<unk>"
# The line ends `datasets`' text loader (and Python's universal newlines) cut a file at: a line of the data code is
# the text between two of these.
LINE_BREAK = r"\r\n|[\r\n]"


def _word_decoder():
    # Every word decodes with a leading space, so a pipeline's `prompt + decode(new_tokens)` stays spaced; `<eos>`
    # decodes to a line break (no space), so decoded text keeps its lines. Each token decodes on its own, so decoding
    # in pieces concatenates to the whole.
    return decoders.Sequence([decoders.Replace(Regex("^"), " "), decoders.Replace(Regex(f"^ {EOS}$"), "\n"),
                              decoders.Fuse()])  # fmt: skip


def _install_line_rule(tk: Tokenizer) -> None:
    """Line breaks become ` <eos> ` before the whitespace split; `<eos>` decodes to a newline."""
    rule = normalizers.Replace(Regex(LINE_BREAK), f" {EOS} ")
    tk.normalizer = rule if tk.normalizer is None else normalizers.Sequence([tk.normalizer, rule])
    tk.decoder = _word_decoder()


def ends_lines_with_eos(tokenizer) -> bool:
    """Whether the tokenizer itself turns a line break into its eos token (tokenizers built before this rule and
    subword tokenizers do not: the data code then appends eos after each line)."""
    eos = tokenizer.eos_token_id
    return eos is not None and tokenizer.backend_tokenizer.encode("\n", add_special_tokens=False).ids == [eos]


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


def build_word_level_tokenizer(lines: Iterable[str], max_vocab_size: int | None = None) -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer over the whitespace tokens of `lines` plus `<eos>` (once per line) and `<unk>`.

    Ids follow frequency (most frequent first, ties by first appearance), as the word-LM reference readers do.
    `<unk>` is known only to the WordLevel model, not declared as a special token: pipelines drop special tokens
    from generated text, and `<unk>` is an ordinary word in these corpora. `<eos>` doubles as the pad token (PTB and
    WikiText have no pad), and as bos so an empty prompt starts a sentence. Each line break of the text to encode
    (`\\n`, `\\r\\n`, `\\r`) becomes `<eos>`.
    """
    counts = Counter()
    for line in lines:
        counts.update(line.split())
        counts[EOS] += 1
    counts.setdefault(UNK, 0)
    words = [w for w, _ in counts.most_common(max_vocab_size)]
    if UNK not in words:  # capped vocabulary: keep <unk> for the words cut off
        words[-1] = UNK
    if not counts[EOS]:
        raise ValueError("Cannot build a tokenizer from an empty corpus.")
    tk = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token=UNK))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    _install_line_rule(tk)
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token=EOS, pad_token=EOS, bos_token=EOS, padding_side="left"
    )
