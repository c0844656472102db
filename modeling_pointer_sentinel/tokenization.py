"""Word-level tokenizer for PTB / WikiText (whitespace tokens, `<unk>`, one `<eos>` per line added by the data code)."""

from collections import Counter
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

EOS, UNK = "<eos>", "<unk>"


def build_word_level_tokenizer(lines: Iterable[str], max_vocab_size: int | None = None) -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer over the whitespace tokens of `lines` plus `<eos>` (once per line) and `<unk>`.

    Ids follow frequency (most frequent first, ties by first appearance), as the word-LM reference readers do.
    `<unk>` is known only to the WordLevel model, not declared as a special token: pipelines drop special tokens
    from generated text, and `<unk>` is an ordinary word in these corpora. `<eos>` doubles as the pad token (PTB and
    WikiText have no pad), and as bos so an empty prompt starts a sentence.
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
    # Every token decodes with a leading space, so a pipeline's `prompt + decode(new_tokens)` stays spaced.
    tk.decoder = decoders.Sequence([decoders.Replace(Regex("^"), " "), decoders.Fuse()])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token=EOS, pad_token=EOS, bos_token=EOS, padding_side="left"
    )
