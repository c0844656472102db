"""`tokenizer.add_tokens([...])`, then `model.resize_token_embeddings(len(tokenizer))`, on every kind of model: spelled
(the shipped folders'), with the adaptive softmax, with placeholders, plain. An added token is a word of the model, its
id after the placeholders or the spelling symbols; text without it scores as before, text with it is scored, copied,
generated and decoded like any word, and the resized model saves and loads as itself."""

import copy
import math

import pytest
import torch
from conftest import ROOT, tiny_model
from test_hf_integration import run_fresh
from transformers import AutoModelForCausalLM, AutoTokenizer

from modeling_pointer_sentinel.modeling_pointer_sentinel import ADDED_WORD_MARGIN
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary, spelling_vocabulary

LINES = ["the ship was sunk in the bay .", "the crew was saved by the ship .", "a ship of the line was built ."] * 3
NEW = ["<speaker>", "<aside>"]
ADAPTIVE = dict(adaptive_softmax_cutoffs=[4, 10], adaptive_softmax_div_value=2.0)
KINDS = {  # tokenizer, the model's settings
    "spelled": ("spell", dict(oov_slots=8, speller_size=6, oov_pointer=True)),
    "spelled_adaptive": ("spell", dict(oov_slots=8, speller_size=6, oov_pointer=True, **ADAPTIVE)),  # as shipped
    "adaptive": ("closed", ADAPTIVE),
    "placeholders": ("open", dict(oov_slots=4, oov_pointer=True)),
    "plain": ("closed", dict(use_pointer=False, tie_word_embeddings=False, hidden_size=10)),
}
OLD_TEXT = "the crew was sunk by the Zorbane . the Zorbane was built in the bay ."
NEW_TEXT = "<speaker> the crew was sunk <aside> by the Zorbane. <speaker> the Zorbane was <speaker> built."


def tokenizer(kind: str):
    word_level = build_word_level_tokenizer(LINES, text_rules="wikitext")
    return {"spell": spelling_vocabulary, "open": lambda t: open_vocabulary(t, oov_slots=4), "closed": lambda t: t}[
        KINDS[kind][0]
    ](word_level)


def pair(kind: str, seed: int = 0):
    """The kind's tokenizer and a tiny model over its words (float64, eval)."""
    tok = tokenizer(kind)
    unk = {"unk_token_id": tok.unk_token_id} if KINDS[kind][0] != "closed" else {}
    m = tiny_model(seed, vocab_size=tok.backend_tokenizer.get_vocab_size(with_added_tokens=False), **unk,
                   eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id, **KINDS[kind][1])  # fmt: skip
    return tok, m.double().eval()


def resized(kind: str, seed: int = 0):
    tok, m = pair(kind, seed)
    tok.add_tokens(NEW)
    m.resize_token_embeddings(len(tok))
    return tok, m


def ids_of(tok, text: str) -> torch.Tensor:
    return tok(text, return_tensors="pt").input_ids


def extras(m) -> int:
    return 258 if m.config.speller_size else m.config.oov_slots


@pytest.mark.parametrize("kind", KINDS)
def test_text_without_the_new_tokens_scores_as_before(kind):
    tok, m = pair(kind)
    m.float()
    ids = ids_of(tok, OLD_TEXT)
    with torch.no_grad():
        before = m(ids, labels=ids)
        greedy = m.generate(ids, max_new_tokens=8, do_sample=False)
    width = len(tok)
    tok.add_tokens(NEW)
    assert len(tok) == width + 2
    assert ids_of(tok, OLD_TEXT).tolist() == ids.tolist()
    m.resize_token_embeddings(len(tok))
    assert m.config.added_tokens == 2 and m.config.vocab_size == tok.backend_tokenizer.get_vocab_size(False)
    with torch.no_grad():
        after = m(ids, labels=ids)
        assert m.generate(ids, max_new_tokens=8, do_sample=False).tolist() == greedy.tolist()
    assert after.logits.shape[-1] == width + 2
    torch.testing.assert_close(after.logits[..., :width], before.logits, atol=1e-6, rtol=0)
    torch.testing.assert_close(after.loss, before.loss, atol=1e-6, rtol=0)
    # the new words start with at most exp(-margin) / (the old words of their softmax) of the mass
    assert (after.logits.log_softmax(-1)[..., width:] < -ADDED_WORD_MARGIN).all()  # (plain: logits, unnormalised)


@pytest.mark.parametrize("kind", ["spelled", "spelled_adaptive"])
def test_bits_per_byte_counts_each_new_token_as_a_vocabulary_word(kind):
    """Text with the new tokens scored as examples/evaluate.py scores it (`spelling.text_bits_per_byte`, one row): a
    new token is a word of the vocabulary kind, counted with its UTF-8 bytes and one separator, and the words' nats
    are the model's own target log-probs (the row's first word, here a new token, is the context only)."""
    from modeling_pointer_sentinel.spelling import text_bits_per_byte

    tok, m = resized(kind)
    ids = ids_of(tok, NEW_TEXT)[0]
    words = "<speaker> the crew was sunk <aside> by the Zorbane . <speaker> the Zorbane was <speaker> built .".split()
    assert tok.decode(ids) == NEW_TEXT and ids[0] == tok.convert_tokens_to_ids("<speaker>")
    figures = text_bits_per_byte(m, tok, ids, batch_size=1)
    assert figures["words"] == len(words) - 1 and figures["bytes"] == sum(len(w) + 1 for w in words[1:])
    assert (figures["vocabulary"]["words"], figures["new"]["words"], figures["copy"]["words"]) == (14, 1, 1)
    with torch.no_grad():
        nats = -m(ids[None], labels=ids[None]).target_log_probs[0, :-1].sum().item()
    assert abs(figures["bits_per_byte"] * figures["bytes"] * math.log(2) - nats) < 1e-9 * nats


@pytest.mark.parametrize("kind", KINDS)
def test_text_with_the_new_tokens_is_scored_normalised_and_decodes_back(kind):
    tok, m = resized(kind)
    ids = ids_of(tok, NEW_TEXT)
    V, E = m.config.vocab_size, extras(m)
    assert tok.convert_tokens_to_ids(NEW) == [V + E, V + E + 1]
    assert (ids == V + E).sum() == 3 and (ids == V + E + 1).sum() == 1
    if KINDS[kind][0] == "closed":  # a word-level tokenizer: an unseen word reads <unk>
        assert tok.decode(ids[0]).strip() == NEW_TEXT.replace("Zorbane", "<unk>")
    else:
        assert tok.decode(ids[0]) == NEW_TEXT
    with torch.no_grad():
        out = m(ids, labels=ids)
    assert out.logits.shape[-1] == len(tok)
    if kind != "plain":  # the mixture's log-probabilities (the plain LSTM's logits are its softmax's)
        torch.testing.assert_close(out.logits.logsumexp(-1), torch.zeros(ids.shape, dtype=torch.float64), atol=1e-9,
                                   rtol=0)  # fmt: skip
    picked = out.logits.log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    assert torch.isfinite(picked).all()
    torch.testing.assert_close(-picked.mean(), out.loss, atol=1e-9, rtol=0)
    torch.testing.assert_close(picked, out.target_log_probs[:, :-1], atol=1e-9, rtol=0)
    # chunks through the cache score as the whole: its window holds the new words in the model's numbering
    for at in (3, ids.shape[1] // 2):
        with torch.no_grad():
            first = m(ids[:, :at], use_cache=True)
            rest = m(ids[:, at:], past_key_values=first.past_key_values).logits
        torch.testing.assert_close(torch.cat([first.logits, rest], 1), out.logits, atol=1e-9, rtol=0)
    if not m.config.speller_size:  # the base model (AutoModel) reads the same token ids
        torch.testing.assert_close(m.model(ids).last_hidden_state, out.last_hidden_state, atol=0, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_a_training_step_reaches_the_new_rows_with_finite_gradients(kind):
    tok, m = resized(kind)
    ids = ids_of(tok, NEW_TEXT)
    m.train()
    loss = m(ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in m.parameters() if p.grad is not None]
    assert all(torch.isfinite(g).all() for g in grads)
    V = m.config.vocab_size
    assert m.get_input_embeddings().weight.grad[V : V + 2].abs().sum(-1).gt(0).all()  # both read as inputs
    out = m.lm_head.tail_bias[-1] if m.config.adaptive_softmax_cutoffs else m.lm_head.bias
    assert out.grad[-2:].abs().gt(0).all()  # and scored as targets


def copier(m):
    """The pointer made to dominate: q = 0, so the window's positions and the sentinel share the attention evenly and
    the window's most frequent word is the likeliest next one."""
    with torch.no_grad():
        m.pointer.query.weight.zero_()
        m.pointer.query.bias.zero_()
    return m


def taught(m, k: int):
    """The k-th new word's output bias raised (with the adaptive softmax, its cluster's too), as fine-tuning on text
    that holds it would, and the pointer's sentinel made to take the attention: the vocabulary leads."""
    row = m.config.vocab_size + k
    with torch.no_grad():
        if m.config.adaptive_softmax_cutoffs:
            m.lm_head.tail_bias[-1][row - m.config.adaptive_softmax_cutoffs[-1]].fill_(40.0)
            m.lm_head.head_bias[-1].fill_(40.0)
        else:
            m.lm_head.bias[row].fill_(40.0)
        if m.pointer is not None:  # q = 1, s = 10: the sentinel's score 10 D, a position's at most D
            m.pointer.query.weight.zero_()
            m.pointer.query.bias.fill_(10.0)
            m.pointer.sentinel.fill_(10.0)
    return m


POINTER_KINDS = [k for k in KINDS if KINDS[k][1].get("use_pointer", True)]


@pytest.mark.parametrize("kind", POINTER_KINDS)
def test_the_pointer_copies_a_new_token_in_generate_on_every_decode_path(kind):
    tok, m = resized(kind)
    copier(m)
    V, E = m.config.vocab_size, extras(m)
    prompt = ids_of(tok, "<speaker> the <speaker> ship <speaker> was")
    runs = {}
    for step in ("fast", "forward"):
        runs[step] = m.generate(prompt, max_new_tokens=4, do_sample=False, decode_step=step, output_scores=True,
                                return_dict_in_generate=True)  # fmt: skip
    fast, slow = runs["fast"], runs["forward"]
    new = fast.sequences[0, prompt.shape[1] :].tolist()
    assert new.count(V + E) >= 1, new  # copied
    assert fast.sequences.tolist() == slow.sequences.tolist()
    torch.testing.assert_close(torch.stack(fast.scores).float(), torch.stack(slow.scores).float(), atol=1e-6, rtol=0)
    with torch.no_grad():  # each step's scores are forward's log p of the sequence so far, in id order
        whole = m(fast.sequences).logits[0, prompt.shape[1] - 1 : -1]
    torch.testing.assert_close(torch.stack(fast.scores)[:, 0].float(), whole.float(), atol=1e-5, rtol=0)
    assert "<speaker>" in tok.decode(fast.sequences[0, prompt.shape[1] :])
    beam = m.generate(prompt, max_new_tokens=4, num_beams=3, do_sample=False)
    assert V + E in beam[0, prompt.shape[1] :].tolist()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("decoding", ["greedy", "sample"])
def test_generate_writes_a_new_token_the_model_has_learned(kind, decoding):
    """The new word's output bias raised, as fine-tuning would: greedy search and sampling write it, fast and forward
    alike, and it decodes back."""
    tok, m = resized(kind)
    V, E = m.config.vocab_size, extras(m)
    taught(m, 1)
    prompt = ids_of(tok, "the ship was")
    kw = dict(do_sample=True, top_k=0) if decoding == "sample" else dict(do_sample=False)
    outs = []
    for step in ("fast", "forward"):
        torch.manual_seed(0)
        outs.append(m.generate(prompt, max_new_tokens=3, decode_step=step, **kw))
    assert outs[0].tolist() == outs[1].tolist()
    assert outs[0][0, prompt.shape[1] :].tolist() == [V + E + 1] * 3
    assert tok.decode(outs[0][0, prompt.shape[1] :]).split() == ["<aside>"] * 3


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Each kind resized and saved (float64), its logits on text with the new tokens, and the same logits from the
    folder loaded by AutoModelForCausalLM in a fresh process (remote code, the package not importable)."""
    root = tmp_path_factory.mktemp("resized")
    want = {}
    for kind in KINDS:
        tok, m = resized(kind)
        ids = ids_of(tok, NEW_TEXT)
        with torch.no_grad():
            want[kind] = (ids, m(ids).logits)
        m.save_pretrained(root / kind)
        torch.save(ids, root / kind / "ids.pt")
    run_fresh(
        f"""
        import torch
        from transformers import AutoModelForCausalLM
        for kind in {list(KINDS)!r}:
            m = AutoModelForCausalLM.from_pretrained(kind, trust_remote_code=True, dtype=torch.float64).eval()
            assert type(m).__module__.startswith("transformers_modules"), type(m).__module__
            with torch.no_grad():
                torch.save(m(torch.load(kind + "/ids.pt")).logits, kind + "/logits.pt")
        """,
        cwd=root,
    )
    return root, want


@pytest.mark.parametrize("kind", KINDS)
def test_save_and_reload_in_a_fresh_process_gives_the_same_logits(kind, saved):
    root, want = saved
    ids, logits = want[kind]
    torch.testing.assert_close(torch.load(root / kind / "logits.pt"), logits, atol=1e-12, rtol=0)
    assert AutoModelForCausalLM.from_pretrained(root / kind).config.added_tokens == 2


@pytest.mark.parametrize("kind", KINDS)
def test_bad_sizes_are_one_clear_error_and_resizing_back_restores_the_model(kind):
    tok, m = pair(kind)
    ids = ids_of(tok, OLD_TEXT)
    with torch.no_grad():
        before = m(ids).logits
    width = len(tok)
    for bad in (width - 1, 0, float(width + 1), *([m.config.vocab_size] if extras(m) else [])):
        with pytest.raises(ValueError, match=r"pass len\(tokenizer\)") as info:
            m.resize_token_embeddings(bad)
        assert len(str(info.value).splitlines()) == 1
    with pytest.raises(ValueError, match="pad_to_multiple_of is not supported"):
        m.resize_token_embeddings(width + 2, pad_to_multiple_of=8)
    assert m.config.added_tokens == 0 and m.resize_token_embeddings() is m.get_input_embeddings()
    m.resize_token_embeddings(width + 2)
    m.resize_token_embeddings(width + 1)  # the last added word dropped
    assert m.config.added_tokens == 1 and m.get_input_embeddings().weight.shape[0] == m.config.vocab_size + 1
    m.resize_token_embeddings(width)
    with torch.no_grad():
        assert torch.equal(m(ids).logits, before)  # the original tables, bit for bit


@pytest.mark.parametrize("mean_resizing", [True, False])
def test_new_rows_are_the_mean_or_drawn_as_init_draws_and_the_bias_starts_below(mean_resizing):
    _, m = pair("placeholders")  # untied
    tables = [m.get_input_embeddings().weight, m.lm_head.weight]
    old, bias = [t.clone() for t in tables], m.lm_head.bias.clone()
    m.resize_token_embeddings(m.config.vocab_size + 4 + 3, mean_resizing=mean_resizing)
    for t, before in zip(tables, old, strict=True):
        rows = t[-3:]
        if mean_resizing:
            torch.testing.assert_close(rows, before.mean(0).expand(3, -1), atol=1e-15, rtol=0)
        else:
            assert (rows.abs() <= m.config.init_range).all() and len({tuple(r.tolist()) for r in rows}) == 3
    torch.testing.assert_close(m.lm_head.bias[-3:], (bias.mean() - ADDED_WORD_MARGIN).expand(3), atol=1e-12, rtol=0)


@pytest.mark.parametrize("step", ["fast", "forward"])
def test_a_suppressed_unk_suppresses_the_next_placeholder_not_an_added_token(step):
    """With `<unk>` suppressed (the shipped folders' setting), generate never writes a row's next unused placeholder,
    which has no word to write: in token-id order that column is V + k, and the added tokens stay writable."""
    tok, m = resized("placeholders")
    m.generation_config.suppress_tokens = [tok.unk_token_id]
    V, E = m.config.vocab_size, extras(m)
    prompt = ids_of(tok, "Zorbane the <speaker> ship")  # one placeholder used: the next unused one is V + 1
    assert prompt[0].tolist().count(V) == 1
    out = m.generate(prompt, max_new_tokens=3, do_sample=False, decode_step=step, output_scores=True,
                     return_dict_in_generate=True)  # fmt: skip
    scores = torch.stack(out.scores)[:, 0]
    assert (scores[:, V + 1] == -torch.inf).all() and (scores[:, V + E :] > -torch.inf).all()


def test_a_vocab_limit_model_takes_no_added_tokens():
    cut = tiny_model(oov_slots=8, speller_size=6, unk_token_id=3, vocab_limit=13)
    with pytest.raises(ValueError, match="takes no added tokens"):
        cut.resize_token_embeddings(23 + 258 + 1)


def test_the_shipped_wt2_pointer_folder_takes_a_token_and_scores_text_without_it_as_before():
    folder = ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    m = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
    text = "\nThe Quarrington River is a river in the north of England . The Quarrington"
    ids = ids_of(tok, text)
    with torch.no_grad():
        before = m(ids, labels=ids)
    width = len(tok)
    tok.add_tokens(["<speaker>"])
    m.resize_token_embeddings(len(tok))
    with torch.no_grad():
        after = m(ids, labels=ids)
        with_token = ids_of(tok, "<speaker>" + text)
        scored = m(with_token, labels=with_token)
    # float32 rounding of sums over one more word: a few units in the last place of values near -20
    torch.testing.assert_close(after.logits[..., :width], before.logits, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(after.target_log_probs, before.target_log_probs, atol=1e-6, rtol=0)
    torch.testing.assert_close(after.loss, before.loss, atol=1e-6, rtol=0)
    assert with_token[0, 0] == width and tok.decode(with_token[0]).startswith("<speaker>")
    picked = scored.logits[:, :-1].gather(-1, with_token[:, 1:, None])[..., 0]
    torch.testing.assert_close(-picked.mean(), scored.loss, atol=1e-5, rtol=0)


def test_a_resized_model_is_not_exported():
    from modeling_pointer_sentinel.modeling_pointer_sentinel import pack_weights

    _, m = resized("placeholders")
    pack_weights(m)  # the decode step's own packing
    with pytest.raises(ValueError, match="not exported"):
        pack_weights(copy.deepcopy(m), input_first=False)


def test_the_pipeline_passes_an_added_token_to_a_placeholder_model():
    """The pipeline reads placeholders the model has no column for as `<unk>`; an added token is a word, kept."""
    from transformers import pipeline

    from modeling_pointer_sentinel.pipeline_pointer_sentinel import PointerSentinelTextGenerationPipeline

    tok, m = resized("placeholders")
    pipe = pipeline("text-generation", model=m, tokenizer=tok, pipeline_class=PointerSentinelTextGenerationPipeline)
    ids = pipe.preprocess("the <speaker> was sunk")["input_ids"]
    assert ids.tolist() == ids_of(tok, "the <speaker> was sunk").tolist()
    assert tok.convert_tokens_to_ids("<speaker>") in ids[0].tolist()


def test_export_onnx_refuses_a_resized_folder_in_one_line(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    import importlib.util

    spec = importlib.util.spec_from_file_location("export_onnx", ROOT / "examples" / "export_onnx.py")
    export_onnx = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export_onnx)
    tok, m = resized("spelled")
    m.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    capsys.readouterr()  # the save's progress bars
    with pytest.raises(SystemExit):
        export_onnx.main([str(tmp_path / "m"), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "a model with added tokens" in err.strip().splitlines()[-1], err
