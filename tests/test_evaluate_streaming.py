"""examples/evaluate.py scores a split in bounded memory (issue 60, part 7): the streams are read a block at a time, the
figures come from running totals, and the neural cache mixes as it streams, so a text four times longer leaves the peak
of Python's allocations (tracemalloc: numpy arrays included) and of live tensor storage where it was. The streaming
parts are checked against the whole-split computations they replace."""

import gc
import math
import tracemalloc
import weakref

import numpy as np
import pytest
import torch
from conftest import evaluate_script, tiny_model
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from modeling_pointer_sentinel.evaluation import (
    NeuralCache,
    PlaceholderStreams,
    ScoreTotals,
    collect_outputs,
    file_streams,
    gate_statistics,
    new_word_targets,
    next_new_words,
    placeholder_streams,
    stream_outputs,
)
from modeling_pointer_sentinel.modeling_pointer_sentinel import SPELL_END, PointerSentinelCache
from modeling_pointer_sentinel.spelling import WORD_KINDS, SpelledText, vocabulary_bytes
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary
from modeling_pointer_sentinel.training import encode_lines, shard_streams

KNOWN = "the cat sat on a mat and dog ran to big red house".split()
UNSEEN = ["Zorbane", "Quexil", "Mirvale", "Dostrek", "Kelvash"]


class LiveTensorBytes(TorchDispatchMode):
    """The peak bytes of CPU tensor storage alive at once, over the tensors the ops under it return (a storage counted
    once, until no tensor the mode saw holds it). torch's CPU allocator keeps no statistics of its own."""

    def __init__(self):
        super().__init__()
        self.live, self.now, self.peak = {}, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.untyped_storage().data_ptr():
                self._hold(t)
        return out

    def _hold(self, t):
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in self.live:
            self.live[key][1] += 1
        else:
            self.live[key] = [storage.nbytes(), 1]
            self.now += storage.nbytes()
            self.peak = max(self.peak, self.now)
        weakref.finalize(t, self._release, key)

    def _release(self, key):
        entry = self.live[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self.live[key]
            self.now -= entry[0]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny pointer model with placeholder slots and its open-vocabulary tokenizer, and a raw text with unseen words
    and literal <unk> (`text.txt`) beside its four-times repetition (`text_x4.txt`: the same words, 4x the targets).
    """
    d = tmp_path_factory.mktemp("streaming")
    lines = [" ".join(KNOWN[i:] + KNOWN[:i]) for i in range(len(KNOWN))] + ["<unk> the cat"]
    tok = open_vocabulary(build_word_level_tokenizer(lines), oov_slots=4)
    model = tiny_model(vocab_size=tok.word_vocab_size, oov_slots=4, unk_token_id=tok.unk_token_id,
                       eos_token_id=tok.eos_token_id, pointer_window=10)  # fmt: skip
    model.save_pretrained(d / "model")
    tok.save_pretrained(d / "model")
    g = torch.Generator().manual_seed(0)
    text = []
    for _ in range(300):  # ~3k targets
        words = [KNOWN[i] for i in torch.randint(len(KNOWN), (8,), generator=g).tolist()]
        words.insert(
            int(torch.randint(8, (1,), generator=g)), UNSEEN[int(torch.randint(len(UNSEEN), (1,), generator=g))]
        )
        if torch.rand(1, generator=g) < 0.2:
            words.insert(1, "<unk>")
        text.append(" ".join(words))
    (d / "text.txt").write_text("\n".join(text) + "\n")
    (d / "text_x4.txt").write_text("\n".join(text * 4) + "\n")
    return d


def peaks(folder, name: str, *flags) -> tuple[int, int, dict]:
    """evaluate.py on `name`, from its text (tokenised into a fresh cache) to its figures: (the peak of tracemalloc's
    traced bytes from the first forward on, the peak of live tensor storage, the results). The check of the file
    before it (`cli.check_text_file`, 1 MiB blocks) and the token cache (data.CHUNK_BYTES blocks) read blocks of a
    fixed size in a long file, but the whole of a file as short as this test's, so the Python peak is taken while the
    split is scored; what was read before and is still held counts in it."""
    args = [str(folder / "model"), "--test_file", str(folder / name), "--data_cache_dir", str(folder / f"cache-{name}"),
            "--batch_size", "4", "--bptt", "50", *flags]  # fmt: skip
    main = evaluate_script()

    def scoring(module, inputs):
        # the model's forward leaves cyclic garbage (~1 KB a call) that the collector frees when it runs, which it
        # decides by the whole heap: collected here every 8 calls instead, so that the peaks do not depend on when
        if calls[0] % 8 == 0:
            gc.collect()
        if calls[0] == 0:
            tracemalloc.reset_peak()
        calls[0] += 1

    calls, hook = [0], torch.nn.modules.module.register_module_forward_pre_hook(scoring)
    gc.disable()
    tracemalloc.start()
    try:
        with LiveTensorBytes() as tensors:
            results = main(args)
        return tracemalloc.get_traced_memory()[1], tensors.peak, results
    finally:
        tracemalloc.stop()
        hook.remove()
        gc.enable()


def test_a_text_four_times_longer_does_not_raise_the_peak_memory(folder):
    """The peaks of Python allocations and of tensor storage while a raw text is scored (unseen words as placeholders,
    UPP, gate statistics, the neural cache, --output_json) hardly move when the text is four times longer: nothing
    is kept per target. Kept per target, the outputs and the gate's statistics cost ~60 bytes of Python objects and
    ~80 of tensors a target (measured on the code before streaming: 61 and 81); streamed, ~11 and ~1, the model's
    own small per-call leftovers."""
    flags = ("--cache", "--cache_window", "30", "--output_json")
    peaks(folder, "text.txt", *flags, str(folder / "warm.json"))  # one-time costs (lazy imports, caches) out of the way
    short_py, short_tensors, short = peaks(folder, "text.txt", *flags, str(folder / "short.json"))
    long_py, long_tensors, long = peaks(folder, "text_x4.txt", *flags, str(folder / "long.json"))
    assert long["tokens"] > 3.9 * short["tokens"] and long["unseen_words"]["reading"] == "placeholders"
    more = long["tokens"] - short["tokens"]
    assert (long_py - short_py) / more < 24, (short_py, long_py, more)  # bytes per additional target
    assert (long_tensors - short_tensors) / more < 8, (short_tensors, long_tensors, more)


def test_file_streams_read_the_streams_shard_streams_cuts(tmp_path):
    """Positional reads of an id file give the streams `shard_streams` cuts from its memory map, block by block."""
    ids = np.random.default_rng(0).integers(0, 60_000, 1003).astype(np.uint16)
    ids.tofile(tmp_path / "ids.bin")
    mapped = np.memmap(tmp_path / "ids.bin", dtype=np.uint16, mode="r")
    for rows, limit in ((1, None), (3, None), (4, 501)):
        want = shard_streams(torch.from_numpy(mapped.astype(np.int64))[:limit], rows)
        got = file_streams(tmp_path / "ids.bin", np.uint16, rows, limit)
        assert got.shape == want.shape
        assert torch.equal(torch.cat([got[:, a : a + 37] for a in range(0, want.shape[1], 37)], 1), want)


def test_placeholder_streams_number_each_row_as_the_whole_split_does():
    """Read in overlapping blocks (as bptt chunks are), the per-row numbering equals `placeholder_streams` of the whole
    split: first occurrences V, V+1, ..., the words past the row's slots <unk>."""
    V, slots, unk = 10, 3, 1
    flat = torch.randint(0, V, (401,), generator=torch.Generator().manual_seed(1))
    unseen = torch.rand(401, generator=torch.Generator().manual_seed(2)) < 0.3
    flat[unseen] = V + torch.randint(0, 7, (int(unseen.sum()),), generator=torch.Generator().manual_seed(3))
    want = placeholder_streams(flat, 4, V, slots, unk)
    streams = PlaceholderStreams(shard_streams(flat, 4), V, slots, unk)
    blocks = [streams[:, p : p + 8] for p in range(0, want.shape[1] - 1, 7)]  # x and y of bptt 7 overlap by one id
    got = torch.cat([blocks[0], *(b[:, 1:] for b in blocks[1:])], 1)
    assert (want >= V).any() and (want == unk).any()
    assert torch.equal(got, want)


def test_new_word_targets_chunk_by_chunk_are_those_of_the_whole_streams():
    """`next_new_words` over bptt chunks, each row's history carried, marks the targets `new_word_targets` marks over
    the whole streams (UPP's count): a row's first occurrence of each placeholder, not each chunk's."""
    V, slots, unk = 10, 4, 1
    flat = torch.randint(0, V, (401,), generator=torch.Generator().manual_seed(6))
    unseen = torch.rand(401, generator=torch.Generator().manual_seed(7)) < 0.3
    flat[unseen] = V + torch.randint(0, 6, (int(unseen.sum()),), generator=torch.Generator().manual_seed(8))
    streams = placeholder_streams(flat, 4, V, slots, unk)
    want = new_word_targets(streams, V, slots, unk)
    used, parts = torch.zeros(4, dtype=torch.long), []
    for p in range(0, streams.shape[1] - 1, 9):
        new, used = next_new_words(streams[:, p : p + 9], streams[:, p + 1 : p + 10], V, slots, unk, used)
        parts.append(new)
    assert want.any() and not want.all() and torch.equal(torch.cat(parts, 1), want)


def test_running_totals_give_the_whole_outputs_figures():
    """`ScoreTotals` added chunk by chunk gives the perplexities and the gate statistics of the outputs kept whole."""
    model = tiny_model(vocab_size=23, pointer_window=5)
    streams = torch.randint(0, 23, (3, 301), generator=torch.Generator().manual_seed(4))
    whole = collect_outputs(model, streams, 40)
    totals = ScoreTotals(23, 300)
    for out in stream_outputs(model, streams, 40):
        totals.add(out)
    assert totals.perplexity() == pytest.approx(whole.perplexity(), rel=1e-12)
    assert totals.perplexity(pointer=False) == pytest.approx(whole.perplexity(pointer=False), rel=1e-12)
    want, got = gate_statistics(whole, min_count=5), totals.gate_statistics(min_count=5)
    assert got["mean_gate"] == pytest.approx(want["mean_gate"], rel=1e-12)
    assert got["mean_pointer_share_of_target_prob"] == pytest.approx(want["mean_pointer_share_of_target_prob"])
    assert len(got["top_pointer_words"]) > 3 and got["top_pointer_words"] == want["top_pointer_words"]


@pytest.mark.parametrize("chunk", [7, 16])
def test_the_neural_cache_streamed_in_chunks_scores_each_position_as_on_the_whole_stream(chunk):
    """`NeuralCache.stream` over bptt chunks (then `flush`) gives each position's mixed log p(y) as the cache over the
    whole stream does: the positions are held back until they fill the cache's own chunks, its memory carried."""
    g = torch.Generator().manual_seed(5)
    hidden, targets = torch.randn(2, 101, 6, generator=g), torch.randint(0, 9, (2, 101), generator=g)
    lp = -torch.rand(2, 101, generator=g) * 3
    want = NeuralCache(window=20, theta=0.7, lam=0.3, chunk=chunk)(hidden, targets, lp)
    cache = NeuralCache(window=20, theta=0.7, lam=0.3, chunk=chunk)
    parts = [cache.stream(hidden[:, a : a + 12], targets[:, a : a + 12], lp[:, a : a + 12]) for a in range(0, 101, 12)]
    got = torch.cat([*parts, cache.flush()], 1)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # the same chunks; a matmul's layout may move an ulp


# ---- a speller folder on text that spells words (examples/evaluate.py's spelled_main) --------------------------------

SHIP = "the ship was sunk in the bay . the crew was saved by the ship . a ship of the line was built .".split()


def coined_text(lines: int, copies: int = 1) -> str:
    """Lines of the speller folder's words, each with a name it lacks (spelled) twice, the second a copy with the name
    of the line before between them (new again, as is the name of three lines before: out of the window); every line
    of one shape, so that every chunk of the text costs as much to score. With `copies`, the lines again and again,
    each copy's names with another first letter."""
    g, names, text = torch.Generator().manual_seed(0), [], []
    for _ in range(lines):
        words = [SHIP[i] for i in torch.randint(len(SHIP), (7,), generator=g).tolist()]
        names.append("".join(chr(97 + i) for i in torch.randint(26, (6,), generator=g).tolist()).title())
        before = names[-min(len(names), 2)], names[-min(len(names), 4)]
        words[2:2] = [names[-1], "was", before[0], names[-1]]
        words.insert(-1, before[1])
        text.append(words)
    return "".join(
        " ".join(chr(65 + (ord(w[0]) - 65 + c) % 26) + w[1:] if w[0].isupper() else w for w in words) + "\n"
        for c in range(copies)
        for words in text
    )


@pytest.fixture(scope="module")
def speller_folder(tmp_path_factory):
    """A tiny speller folder (`test_spelled_forward.spelling_pair`) and a text of coined names beside four copies of
    it with four times the names (`text_x4.txt`)."""
    from test_spelled_forward import spelling_pair

    d = tmp_path_factory.mktemp("spelled_streaming")
    spelling_pair(d / "model")
    (d / "text.txt").write_text(coined_text(150))
    (d / "text_x4.txt").write_text(coined_text(150, copies=4))
    return d


def whole_split_figures(model, ids: torch.Tensor, rows: int, bptt: int, byte_table: torch.Tensor):
    """The spelled scoring as it was before it streamed, kept as the reference: the split's words read whole (a
    Python pass over every id), one padded tensor of `rows` rows, an array of every word's nats. Returns those nats
    (NaN: a row's first word, not scored) and the figures."""
    V, L = model.config.vocab_size, model.config.pointer_window
    owner, kinds, spelled, window, word = [], [], [], [], []
    for x in ids.tolist():
        owner.append(len(kinds))
        if x < V:
            kinds.append("vocabulary")
            spelled.append(0)
            window.append(None)
        elif x - V == SPELL_END:
            kinds.append("copy" if tuple(word) in window[-L:] else "new")
            spelled.append(sum(s < 256 for s in word))
            window.append(tuple(word))
            word = []
        else:
            word.append(x - V)
    owner, n = torch.tensor(owner), len(kinds)
    firsts = torch.searchsorted(owner, torch.arange(rows) * n // rows)
    ends = [*firsts[1:].tolist(), len(ids)]
    width = max(e - s for s, e in zip(firsts.tolist(), ends, strict=True))
    padded, mask = ids.new_zeros(rows, width), torch.zeros(rows, width, dtype=torch.bool)
    who = owner.new_full((rows, width), -1)
    for b, (s, e) in enumerate(zip(firsts.tolist(), ends, strict=True)):
        padded[b, : e - s], mask[b, : e - s], who[b, : e - s] = ids[s:e], True, owner[s:e]
    nats, cache = torch.zeros(n, dtype=torch.float64), PointerSentinelCache()
    with torch.no_grad():
        for start in range(0, width - 1, bptt):
            k = min(bptt, width - 1 - start)
            x, y = padded[:, start : start + k], padded[:, start + 1 : start + k + 1]
            out = model(x, attention_mask=mask[:, start : start + k], past_key_values=cache)
            log_p = out.logits.gather(-1, y.unsqueeze(-1)).squeeze(-1).double()
            counted = mask[:, start + 1 : start + k + 1]
            nats.index_add_(0, who[:, start + 1 : start + k + 1][counted], -log_p[counted])
    nats[owner[firsts]] = math.nan
    word_ids = torch.full((n,), -1, dtype=torch.long)
    word_ids[owner[ids < V]] = ids[ids < V]
    word_bytes = torch.where(word_ids >= 0, byte_table[word_ids.clamp(min=0)], torch.tensor(spelled) + 1)
    scored = ~nats.isnan()
    bits = torch.where(scored, nats, 0) / math.log(2)
    total_bits, total_bytes = bits.sum().item(), word_bytes[scored].sum().item()
    figures = {"bits_per_byte": total_bits / total_bytes, "words": int(scored.sum()), "bytes": int(total_bytes),
               "word_perplexity": math.exp(nats[scored].mean().item())}  # fmt: skip
    kind = torch.tensor([WORD_KINDS.index(k) for k in kinds])
    for i, name in enumerate(WORD_KINDS):
        pick = scored & (kind == i)
        if pick.any():
            b, n_bytes = bits[pick].sum().item(), word_bytes[pick].sum().item()
            figures[name] = {"words": int(pick.sum()), "bytes": int(n_bytes), "bits_per_byte": b / n_bytes,
                             "bits_share": b / total_bits}  # fmt: skip
    return nats, figures


def assert_same_figures(got: dict, want: dict):
    """The same counts, and the same sums to the rounding of their order (relative 1e-12)."""
    for key, value in want.items():
        if isinstance(value, dict):
            assert_same_figures(got[key], value)
        elif isinstance(value, int):
            assert got[key] == value, key
        else:
            assert got[key] == pytest.approx(value, rel=1e-12, abs=0), key


def test_a_spelled_text_four_times_longer_does_not_raise_the_peak_memory(speller_folder):
    """A speller folder on text that spells words streams too: the rows are read from the id file a chunk at a time
    into running totals per kind of word, each word's kind from the spelled words of the last L, so a text four times
    longer, with four times the names, leaves the peaks where they were. Read whole, as before, the split cost ~14
    bytes of Python objects and ~43 of tensors a target here; streamed, ~1 and ~2 (the dearest chunk of the longer
    text; every line has one shape, as the peak of a text of mixed lines is the dearest of its chunks, which a longer
    text draws more of)."""
    flags = ("--bptt", "200")  # the forward's leftovers (collected every 8 calls) spread over 800 targets a call
    peaks(speller_folder, "text.txt", *flags)  # one-time costs (lazy imports, caches) out of the way
    short_py, short_tensors, short = peaks(speller_folder, "text.txt", *flags)
    long_py, long_tensors, long = peaks(speller_folder, "text_x4.txt", *flags)
    assert long["tokens"] > 3.9 * short["tokens"] and long["copy"]["words"] > 500 and long["new"]["words"] > 1500
    more = long["tokens"] - short["tokens"]
    assert (long_py - short_py) / more < 3, (short_py, long_py, more)  # bytes per additional target
    assert (long_tensors - short_tensors) / more < 4, (short_tensors, long_tensors, more)


@pytest.mark.parametrize("rows,bptt,limit", [(4, 200, None), (3, 50, None), (1, 64, 2003), (5, 17, 1502)])
def test_the_streamed_spelled_figures_are_the_whole_split_figures(speller_folder, rows, bptt, limit):
    """examples/evaluate.py's spelled scoring, streamed, gives each word the nats the whole-split scoring gave it, bit
    for bit (the same rows, chunks and forward), and the same figures to the rounding of the sums' order; --max_tokens
    cuts the text back to the last whole word as before."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, text = speller_folder / "model", speller_folder / "text.txt"
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = encode_lines(tok, text.read_text().splitlines())  # the ids the token cache holds
    V, byte_table = model.config.vocab_size, vocabulary_bytes(tok, model.config.vocab_size)
    ends = ((ids < V) | (ids == V + SPELL_END))[:limit].nonzero()
    cut = int(ends[-1]) + 1  # --max_tokens: back to the last word's end
    assert cut < limit if limit else cut == len(ids)  # each limit falls inside a spelled word
    want_nats, want = whole_split_figures(model, ids[:cut], rows, bptt, byte_table)
    streamed = SpelledText(ids.numpy()[None], byte_table, V, model.config.pointer_window, rows, limit)
    nats = torch.full_like(want_nats, math.nan)
    for scores in streamed.scores(model, bptt):
        nats[scores.place] = scores.nats
    assert torch.equal(nats.isnan(), want_nats.isnan()) and torch.equal(nats.nan_to_num(), want_nats.nan_to_num())
    flags = ["--batch_size", str(rows), "--bptt", str(bptt), *(["--max_tokens", str(limit - 1)] if limit else [])]
    got = evaluate_script()([str(folder), "--test_file", str(text), "--data_cache_dir", str(speller_folder / "cache"),
                             *flags])  # fmt: skip
    assert got["tokens"] == cut and got["ppl"] == got["word_perplexity"] and want.keys() >= {*WORD_KINDS}
    assert_same_figures(got, want)
