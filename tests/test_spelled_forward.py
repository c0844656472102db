"""The model on ids that carry the text (`config.speller_size`): every unseen word spelled in bytes at every
occurrence, its word step at `</w>`. `logits` are normalised at every position, byte positions included, cross-entropy
of `logits` is the loss, chunks with the cache equal the whole, and the past never reads the future."""

import math

import pytest
import torch
from conftest import tiny_model

from modeling_pointer_sentinel import PointerSentinelCache

V, UNK, N, L = 23, 3, 8, 5
END, CONT = V + 256, V + 257


def spell(word: str, vocab_size: int = V) -> list[int]:
    """A word's ids as the spelling tokenizer writes them: its UTF-8 bytes, `<+w>` after every 64, then `</w>`."""
    data = word.encode()
    ids = []
    for i in range(0, len(data), 64):
        ids += [vocab_size + b for b in data[i : i + 64]] + [vocab_size + 257]
    return ids[:-1] + [vocab_size + 256]


def text(*parts) -> torch.Tensor:
    """A row of ids from words (ints) and spelled words (strings)."""
    return torch.tensor([sum(([p] if isinstance(p, int) else spell(p) for p in parts), [])])


# repeats inside and beyond the window, a literal <unk>, an accented and a long (two-piece) word
ROW = text(5, "Zor", 7, "Zor", 1, "Émile", UNK, 2, "Zor", 9, 4, 6, 8, 10, 11, "Émile", "x" * 70, 12, "Zor", 3)


def model(**overrides):
    kw = dict(oov_slots=N, unk_token_id=UNK, pointer_window=L, speller_size=6)
    return tiny_model(**{**kw, **overrides}).double().eval()


VARIANTS = [
    {},
    {"use_pointer": False},
    {"oov_pointer": True},
    {"adaptive_softmax_cutoffs": [8, 15], "adaptive_softmax_div_value": 2.0},
    {"vocab_limit": 13, "oov_pointer": True},  # ROW's words are all below 13
]


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_are_normalised_and_score_every_target_as_the_loss(variant):
    m = model(**variant)
    with torch.no_grad():
        out = m(ROW, labels=ROW)
    assert out.logits.shape == (1, ROW.shape[1], V + 258)
    torch.testing.assert_close(out.logits.logsumexp(-1), torch.zeros(1, ROW.shape[1], dtype=torch.float64),
                               atol=1e-9, rtol=0)  # fmt: skip
    from_logits = out.logits[:, :-1].gather(-1, ROW[:, 1:, None])[..., 0]
    assert torch.isfinite(from_logits).all()
    torch.testing.assert_close(from_logits, out.target_log_probs[:, :-1], atol=1e-9, rtol=0)
    torch.testing.assert_close(out.loss, -from_logits.mean())


@pytest.mark.parametrize("variant", VARIANTS[:3])
def test_chunks_with_the_cache_equal_the_whole_at_every_split(variant):
    """Splits inside a spelled word and at its `</w>` included: the cache carries the word in progress and the
    word step before it."""
    m = model(**variant)
    with torch.no_grad():
        whole = m(ROW).logits
        for at in range(1, ROW.shape[1]):
            cache = PointerSentinelCache()
            parts = [m(ROW[:, :at], past_key_values=cache).logits, m(ROW[:, at:], past_key_values=cache).logits]
            torch.testing.assert_close(torch.cat(parts, 1), whole, atol=1e-9, rtol=0, msg=f"split at {at}")


def test_a_future_change_moves_no_past_logit():
    m = model()
    other = ROW.clone()
    other[0, 20] = V + ord("q")  # a byte of "Émile"'s second occurrence... or of whatever stands there
    with torch.no_grad():
        a, b = m(ROW).logits, m(other).logits
    torch.testing.assert_close(a[:, :20], b[:, :20], atol=0, rtol=0)
    assert not torch.equal(a[:, 20:], b[:, 20:])


def test_a_copied_spelling_costs_less_than_a_new_one_and_a_longer_new_name_more():
    """Trained nowhere, the model still copies through the trie: a name the window holds is cheaper to repeat than
    another name of the same length; a new name of 29 letters costs more than one of 7, and one of 7 more than 2."""
    m = model(oov_pointer=True)
    with torch.no_grad():
        m.pointer.sentinel.fill_(-3.0)  # the pointer takes most of the mass

        def cost(row):
            out = m(row, labels=row)
            return -out.target_log_probs.sum().item()

        copied, fresh = cost(text(5, "Kelpra", 7, "Kelpra")), cost(text(5, "Kelpra", 7, "Dorvan"))
        assert copied < fresh - 1
        costs = [cost(text(5, 7, name, 9)) for name in ("Qa", "Qambrel", "Qambrelvoskithenardulpemsaro")]
        assert costs[0] < costs[1] < costs[2], costs


def test_malformed_spellings_are_one_clear_error():
    m = model()
    for row, message in [(torch.tensor([[5, V + 65, 7]]), "must end with `</w>`"),
                         (torch.tensor([[5, END]]), "`</w>` must close"),
                         (torch.tensor([[5, CONT, V + 65, END]]), "`<\\+w>` must follow"),
                         (torch.tensor([[5, V + 258]]), r"input_ids must lie in \[0, 281\)")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            m(row)


def test_a_new_words_symbols_multiply_to_the_new_word_mass_times_its_spelling():
    """Independently of the byte-level code: the word-level mixture (the same weights, the speller set aside, the
    word as its slot) gives the new-word mass N at the step before the word, the speller run by hand gives
    p_spell(w | h_t); the word's symbols' target log probs add up to log N + log p_spell(w)."""
    m = model(oov_pointer=True)
    row = text(5, 7, "Kelpra", 9)
    with torch.no_grad():
        out = m(row, labels=row)
        speller, m.speller = m.speller, None
        try:
            word_level = m(torch.tensor([[5, 7, V, 9]]))  # the spelled word as the row's first slot
        finally:
            m.speller = speller
        log_new = word_level.logits[0, 1].log_softmax(-1)[V:].logsumexp(-1)  # no slot in the window: all of it new
        symbols = torch.tensor([list(b"Kelpra") + [256]])
        log_spell = speller(word_level.last_hidden_state[:, 1], symbols).gather(-1, symbols[..., None]).sum()
    # positions 1 ... 7 predict K, e, l, p, r, a, </w>
    torch.testing.assert_close(out.target_log_probs[0, 1:8].sum(), log_new + log_spell, atol=1e-9, rtol=0)


def test_a_slot_is_reused_only_when_its_word_is_the_least_recent():
    """More distinct spelled words than slots: the next new word takes the slot of the word seen longest ago, so the
    last oov_slots words (more than the window holds) keep theirs."""
    from modeling_pointer_sentinel.modeling_pointer_sentinel import SpelledRow

    row = SpelledRow()
    names = [(i,) for i in range(N)]
    slots = [row.slot(w, N) for w in names]
    assert slots == list(range(N))
    row.slot(names[0], N)  # the first word seen again: now the second is the least recent
    assert row.slot((99,), N) == 1 and row.slot((98,), N) == 2
    assert row.slot(names[0], N) == 0 and len(row.slots) == N


def eager_model(**overrides):
    """A model that writes new words: `<unk>`'s vocabulary mass (the unseen-word share) made large, the pointer keen."""
    m = model(**{"oov_pointer": overrides.get("use_pointer", True), **overrides})
    with torch.no_grad():
        if m.config.adaptive_softmax_cutoffs:
            m.lm_head.head_bias[UNK] = 6.0
        else:
            m.lm_head.bias[UNK] = 6.0
        if m.pointer is not None:
            m.pointer.sentinel.fill_(-1.0)
    return m


@pytest.mark.parametrize("variant", VARIANTS[:4])
@pytest.mark.parametrize("prompt_end", ["word", "inside a word"])
def test_the_fast_spelled_step_writes_what_forward_writes_and_leaves_the_cache_as_forward_does(variant, prompt_end):
    """generate's spelled decode step (one row) against forward at each token: the same sampled tokens and scores,
    from a prompt that ends after a word or inside one, and the cache it leaves continues as the whole forward."""
    m = eager_model(**variant)  # float64: the two paths agree to rounding
    with torch.no_grad():
        m.speller.out.bias[256] = 3.5  # words of a few bytes, so that a sample holds several
    prompt = text(5, "Zor", 7, "Émile", 2)
    if prompt_end == "inside a word":
        prompt = prompt[:, :-1].clone()
        prompt[0, -1] = V + ord("q")  # ... "Émile" then the bytes "q": a word in progress
        prompt = torch.cat([prompt[:, :-3], prompt[:, -1:]], 1)  # 5 Zor 7 Émile q...
    runs, calls = {}, []
    m.register_forward_hook(lambda *_: calls.append(1))
    for step in ("fast", "forward"):
        torch.manual_seed(3)
        calls.clear()
        runs[step] = m.generate(prompt, max_new_tokens=60, min_new_tokens=60, do_sample=True, top_k=0,
                                return_dict_in_generate=True, output_scores=True, pad_token_id=0,
                                decode_step=step)  # fmt: skip
        assert len(calls) == (1 if step == "fast" else 60)  # the fast step runs forward on the prompt alone
    fast, slow = runs["fast"], runs["forward"]
    assert fast.sequences.tolist() == slow.sequences.tolist()
    new = fast.sequences[0, prompt.shape[1] :].tolist()
    assert END in new and any(t < V for t in new), new  # words spelled and vocabulary words both
    torch.testing.assert_close(torch.stack(fast.scores), torch.stack(slow.scores), atol=1e-6, rtol=0)
    # The fast cache continues as the whole forward, cut inside a word so that the bytes before the next call's first
    # word step read the cache's anchor. It holds every token but the last sampled one (transformers' convention).
    seq, more = fast.sequences, text(3, "Zor", 4, "Kelp")
    with torch.no_grad():
        if m(seq, past_key_values=PointerSentinelCache()).past_key_values.spelled_rows.rows[0].word:
            more = torch.cat([torch.tensor([[END]]), more], 1)  # the sample stopped inside a word: close it first
        whole = m(torch.cat([seq, more], 1)).logits
    n = prompt.shape[1]

    def window_spells(i):  # a spelled word in the window after the first n + i tokens
        with torch.no_grad():
            row = m(seq[:, : n + i], past_key_values=PointerSentinelCache()).past_key_values.spelled_rows.rows[0]
        return any(w is not None for w in row.window)

    cut = [i for i in range(1, len(new)) if V <= new[i] < END and window_spells(i)][-1]  # a byte, copies in reach
    torch.manual_seed(3)
    short = m.generate(prompt, max_new_tokens=cut + 1, min_new_tokens=cut + 1, do_sample=True, top_k=0,
                       return_dict_in_generate=True, pad_token_id=0)  # fmt: skip
    assert short.sequences[0].tolist() == seq[0, : n + cut + 1].tolist()
    rest = torch.cat([seq[:, n + cut :], more], 1)
    with torch.no_grad():
        after = m(rest, past_key_values=short.past_key_values).logits
    torch.testing.assert_close(after, whole[:, -rest.shape[1] :], atol=1e-9, rtol=0)


@pytest.mark.parametrize("decoding", ["greedy", "top-k sampling"])
@pytest.mark.parametrize("variant", VARIANTS[:4])
def test_decoding_that_starts_the_speller_only_where_a_byte_could_be_chosen_writes_what_forward_writes(
    variant, decoding
):
    """Greedy, and top-k sampling after a temperature, whose scores nothing keeps start a word step's speller only
    when the k-th best word's log p is not above the unseen word's whole mass: the same tokens as the forward at
    every token (sampling from one seed), with `<unk>`'s share, one word's and the pointer's from small to dominant
    (words, spelled words and copies of them all written), a mask on a word (`suppress_tokens`), both kinds of word
    step seen (the speller skipped, and started); and the cache it leaves continues as the whole forward, also with
    a spelled word in place of its last word."""
    finished, word_steps = [], []
    for bias, word_bias, sentinel in ((3.0, 0.0, None), (2.0, 1.0, 0.5), (0.0, 3.0, 0.25), (-4.0, 6.0, 3.0)):
        m = eager_model(**variant)
        with torch.no_grad():
            head = m.lm_head.head_bias if m.config.adaptive_softmax_cutoffs else m.lm_head.bias
            head[UNK], head[6] = bias, word_bias
            if m.pointer is not None and sentinel is not None:  # q^T s against q^T h_i: the copies' share lowered
                m.pointer.query.weight.zero_()
                m.pointer.query.bias.fill_(1.0)
                m.pointer.sentinel.fill_(sentinel)
            m.speller.out.bias[256] = 3.5  # words of a few bytes
        finish, step = m._finish_word_step, m._spelled_step
        m._finish_word_step = lambda *a, f=finish: finished.append(1) or f(*a)
        m._spelled_step = lambda w, s, sp, t, lazy=False, f=step: word_steps.append(lazy) or f(w, s, sp, t, lazy)
        prompt = text(5, "Zor", 7, "Émile", 2, "Zor")
        sampling = dict(do_sample=True, temperature=0.7, top_k=3) if decoding != "greedy" else {}
        # n = 2: the window still holds the prompt's spelled words when generate stops; sampling draws from 3 seeds
        for n, seed in [(40, s) for s in range(3 if sampling else 1)] + [(2, 0)]:
            kw = dict(max_new_tokens=n, min_new_tokens=n, pad_token_id=0, suppress_tokens=[4],
                      return_dict_in_generate=True, **sampling)  # fmt: skip
            runs = {step: torch.manual_seed(seed) and m.generate(prompt, decode_step=step, **kw)
                    for step in ("fast", "forward")}  # fmt: skip
            fast, slow = runs["fast"].sequences, runs["forward"].sequences
            assert fast.tolist() == slow.tolist(), (bias, word_bias, sentinel, n, seed)
            # The cache holds every token but the last; it goes on with that token, or with a spelled word in its
            # place if the last was a word (whose bytes read the last word step's copies, which the cache holds).
            with torch.no_grad():
                if m(fast, past_key_values=PointerSentinelCache()).past_key_values.spelled_rows.rows[0].word:
                    rest = torch.cat([fast[:, -1:], torch.tensor([[END]]), text(3)], 1)  # inside a word: close it
                else:
                    rest = text("Zor", 4)
                after = m(rest, past_key_values=runs["fast"].past_key_values).logits
                whole = m(torch.cat([fast[:, :-1], rest], 1)).logits[:, -rest.shape[1] :]
            torch.testing.assert_close(after, whole, atol=1e-9, rtol=0)
    lazy = sum(word_steps)
    assert 0 < len(finished) < lazy, (len(finished), lazy, word_steps)


@pytest.mark.parametrize("kind", ["greedy", "sample", "beam"])
def test_generate_writes_spelled_words_with_the_models_own_scores(kind):
    """Greedy, sampling and beam search write bytes and `</w>` (never an unclosed word before a vocabulary word), and
    each step's scores are forward's log p of the whole sequence at that position."""
    m = eager_model()
    prompt = text(5, "Zor", 7)
    kw = {"greedy": {}, "sample": {"do_sample": True, "top_k": 0}, "beam": {"num_beams": 3}}[kind]
    torch.manual_seed(0)
    out = m.generate(prompt, max_new_tokens=40, min_new_tokens=40, return_dict_in_generate=True, output_scores=True,
                     pad_token_id=0, **kw)  # fmt: skip
    seq = out.sequences[:1]
    new = seq[0, prompt.shape[1] :].tolist()
    assert END in new and any(V <= t < V + 256 for t in new), new
    m(seq)  # a well-formed sequence (raises on an unclosed word)
    if kind != "beam":  # beam scores are cumulative; the sequence itself is checked above
        with torch.no_grad():
            whole = m(seq).logits[0, prompt.shape[1] - 1 : -1]
        scores = torch.stack(out.scores)[:, 0, 1:]  # eos (id 0) is held back by min_new_tokens
        torch.testing.assert_close(scores, whole[:, 1:].float(), atol=1e-5, rtol=0)


def spelling_pair(tmp_path):
    """A spelling tokenizer built on made-up text and an eager spell-mode model over its vocabulary, saved and loaded
    as a user would."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, spelling_vocabulary

    lines = ["the ship was sunk in the bay .", "the crew was saved by the ship .", "a ship of the line was built ."]
    tok = spelling_vocabulary(build_word_level_tokenizer(lines * 3, text_rules="wikitext"))
    V = tok.word_vocab_size
    m = tiny_model(vocab_size=V, oov_slots=N, unk_token_id=tok.unk_token_id, pointer_window=L, speller_size=6,
                   oov_pointer=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id).eval()  # fmt: skip
    with torch.no_grad():
        m.lm_head.bias[tok.unk_token_id] = 6.0
        m.pointer.sentinel.fill_(-1.0)
    tok.save_pretrained(tmp_path)
    m.save_pretrained(tmp_path)
    return AutoTokenizer.from_pretrained(tmp_path), AutoModelForCausalLM.from_pretrained(tmp_path).eval()


def test_template_prompts_encoded_first_each_decode_to_their_own_name_through_generate_and_pipeline(tmp_path):
    """The batch-job pattern: three prompts that differ only in a made-up name, all encoded first, then generated and
    decoded one by one (whole output, and the new tokens alone by a fresh tokenizer); and the pipeline. The ids carry
    each name: no output holds another prompt's name, a placeholder or <unk>."""
    from transformers import AutoTokenizer, pipeline

    from modeling_pointer_sentinel.pipeline_pointer_sentinel import PointerSentinelTextGenerationPipeline

    tok, m = spelling_pair(tmp_path)
    names = ["Kestrelwind", "Ambrecote", "Zølvik"]
    encoded = [tok(f"the {name} was sunk in the bay", return_tensors="pt") for name in names]
    fresh = AutoTokenizer.from_pretrained(tmp_path)
    for name, enc in zip(names, encoded, strict=True):
        torch.manual_seed(0)
        out = m.generate(**enc, max_new_tokens=30, do_sample=True, top_k=0, pad_token_id=tok.eos_token_id)
        text = tok.decode(out[0])
        assert text.startswith(f"the {name} was sunk in the bay"), text
        new = fresh.decode(out[0][enc["input_ids"].shape[1] :])
        assert not any(n in text for n in names if n != name) and "<oov-" not in text + new and "<unk>" not in new
    generator = pipeline(
        "text-generation", model=m, tokenizer=tok, pipeline_class=PointerSentinelTextGenerationPipeline
    )
    for name in names:
        torch.manual_seed(1)
        result = generator(f"the {name} was", max_new_tokens=20, do_sample=True, top_k=0)[0]["generated_text"]
        assert result.startswith(f"the {name} was") and len(result) > len(f"the {name} was"), result


def test_a_vocab_limit_folds_the_cut_words_mass_into_the_unseen_words_and_refuses_them_as_words():
    """vocab_limit K: columns K and up leave the word distribution (probability 0 at every position), their p_vocab
    joins <unk>'s, so the new-word share grows and the whole stays normalised; a cut word given as a word id is an
    error."""
    full, cut = model(), model(vocab_limit=13)
    cut.load_state_dict(full.state_dict())
    with torch.no_grad():
        a, b = full(ROW).logits, cut(ROW).logits
    steps = (ROW[0] < V) | (ROW[0] == END)  # word steps: the positions that offer words
    lowest = torch.finfo(b.dtype).min  # `logits` keep no -inf: an impossible column holds the dtype's lowest value
    assert (b[..., 13:V] == lowest).all() and not (a[0, steps, 13:V] == lowest).any()
    torch.testing.assert_close(b.logsumexp(-1), torch.zeros(b.shape[:-1], dtype=b.dtype), atol=1e-9, rtol=0)
    # the row holds no word from 13 on, so their mass is all p_vocab: it joins the unseen words (<unk> and spelled)
    unseen = [torch.cat([x[0, steps, UNK : UNK + 1], x[0, steps, V:]], -1).logsumexp(-1) for x in (a, b)]
    torch.testing.assert_close(
        unseen[1], torch.logaddexp(unseen[0], a[0, steps, 13:V].logsumexp(-1)), atol=1e-9, rtol=0
    )
    with pytest.raises(ValueError, match="beyond vocab_limit=13: spell them"):
        cut(torch.tensor([[5, 14]]))


def test_bits_per_byte_of_a_spelled_stream_is_the_whole_forwards_and_its_buckets_split_it():
    """spelling.py: a word stream with its rarer words spelled, scored in chunks, gives the bits of one whole
    forward over the same ids; the frequency buckets hold every target word once."""
    from modeling_pointer_sentinel.spelling import spell_stream, spelled_bits_per_byte

    m = model(vocab_limit=13, oov_pointer=True)
    words = torch.tensor([5, 7, 14, 9, 20, 14, 1, 22, 2, 20, 6])
    spellings = {w: (*f"w{w}".encode(), 256) for w in range(V)}
    stream, owner = spell_stream(words, 13, spellings, V)
    assert stream.tolist()[:5] == [5, 7, V + ord("w"), V + ord("1"), V + ord("4")] and owner.tolist()[:5] == [
        0,
        1,
        2,
        2,
        2,
    ]
    word_bytes, counts = torch.full((len(words),), 3), torch.tensor([0, 500, 3, 40, 2, 3, 900, 1, 150, 2, 60])
    got = spelled_bits_per_byte(m, stream, owner, word_bytes, counts, text_bytes=40, chunk=4)
    with torch.no_grad():
        out = m(stream[None], labels=stream[None])
    total = -out.target_log_probs.sum().item() / math.log(2)
    assert math.isclose(got["bits_per_byte"], total / 40, rel_tol=1e-9)
    buckets = [v for k, v in got.items() if k.startswith("train_count_")]
    assert sum(b["words"] for b in buckets) == len(words) - 1
    assert math.isclose(sum(b["bits_per_byte"] * b["words"] * 3 for b in buckets), total, rel_tol=1e-9)


def test_the_spelled_step_is_not_compiled_and_never_silently_left_out():
    m = eager_model()
    with pytest.raises(ValueError, match='decode_step="compiled" is not available with the speller'):
        m.generate(text(5, "Zor"), max_new_tokens=2, decode_step="compiled", pad_token_id=0)
    with pytest.raises(ValueError, match="pointer_mix=False"):
        m.generate(text(5, "Zor"), max_new_tokens=2, pointer_mix=False, pad_token_id=0)
