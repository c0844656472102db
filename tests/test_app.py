"""The page's numbers (examples/app.py, through `modeling_pointer_sentinel.inspection.explain`) are the model's: a
word's vocabulary and pointer parts sum to its probability, and the pointer share the page shows for a generated word
is the one computed from a plain `model(...)` over prompt and continuation. Bad input ends in a message."""

import importlib
import os
import sys

import pytest
import torch
from conftest import ROOT
from transformers import AutoModelForCausalLM, AutoTokenizer

from modeling_pointer_sentinel.inspection import explain


def require(module: str):
    """The module, or a skip; under CI a missing one fails, so CI always runs these tests."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


require("gradio")
sys.path.insert(0, str(ROOT / "examples"))
import app  # noqa: E402

# the page's default folders: the WikiText-2 pointer model, which copies unseen words (copy head), and the plain LSTM
POINTER, PLAIN = app.DEFAULT_MODEL, app.DEFAULT_PLAIN
PTB_POINTER = "pretrained/ptb-pointer-sentinel-lstm-2x200"  # the other corpus's pointer folder, copy head too
PROMPT = "\nThe ship Kestrelwind sailed to Norway. The Kestrelwind was sunk in 1940. The"


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(1)
    return app.Models()


def load(folder):
    model = AutoModelForCausalLM.from_pretrained(ROOT / folder, trust_remote_code=True, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(ROOT / folder, trust_remote_code=True)


@pytest.mark.parametrize("folder", [POINTER, PTB_POINTER, PLAIN])
@torch.no_grad()
def test_parts_sum_to_the_probability(folder):
    """For every top word and every target: vocabulary part (g p_vocab) + pointer part (the window's attention on
    it) = p(w) of the model's logits, to 1e-5; <unk> and the unseen words share <unk>'s vocabulary mass."""
    model, tok = load(folder)
    enc = tok(PROMPT + " Kestrelwind was sunk by the Vorlund .", return_tensors="pt")
    ids = enc.input_ids[0]
    out = model(ids[None])
    e = explain(out, ids, model.config, torch.cat([ids[1:], ids[:1]]), top_k=50)
    p = out.logits[0].double().softmax(-1)
    assert torch.allclose(e.top_prob, p.gather(-1, e.top_ids), atol=1e-6)
    assert torch.allclose(e.top_vocab + e.top_pointer, e.top_prob, atol=1e-5)
    assert torch.allclose(e.target_vocab + e.target_pointer, e.target_prob, atol=1e-5)
    assert (e.top_vocab >= -1e-7).all() and (e.top_pointer >= 0).all()
    # the vocabulary parts are g p_vocab for a word of the vocabulary, computed apart from the mixture
    pv = out.vocab_logits[0].double().softmax(-1)
    V, unk = model.config.vocab_size, model.config.unk_token_id
    own = (e.top_ids < V) & (e.top_ids != unk)
    vocab = out.gate[0, :, None].double() * pv.gather(-1, e.top_ids.clamp(max=V - 1))
    assert torch.allclose(e.top_vocab[own], vocab[own], atol=1e-6)

    # <unk> and the unseen words' columns share g p_vocab(<unk>): the window's placeholders and the columns a new word
    # is written as (the next unused slot, used slots out of the window: logits carry every target); their vocabulary
    # parts sum to it, the plain LSTM's too (it copies none: its unseen words are all new)
    def vocab_part(w):
        return explain(out, ids, model.config, ids.new_full((len(ids),), w)).target_vocab

    columns = [w for w in range(V, p.shape[-1]) if (p[:, w] > 0).any()]
    share = vocab_part(unk) + sum(torch.where(p[:, w] > 0, vocab_part(w), 0.0) for w in columns)
    assert torch.allclose(share, out.gate[0].double() * pv[:, unk], atol=1e-6)
    if not model.config.use_pointer:
        assert (e.gate == 1).all() and (e.top_pointer == 0).all()


@torch.no_grad()
def test_the_pages_pointer_share_is_the_models(models):
    """Each generated word's record (what the page colours and shows) against one forward of the model over prompt +
    continuation: p(w), its pointer part sum_{i in window, x_i = w} a_i and the share, to 1e-5; the gate too."""
    *_, (_, words, text) = ((), [], ""), *app.generate_words(models, POINTER, PROMPT, "greedy", 30)
    model, tok = load(POINTER)
    enc = tok(PROMPT, return_tensors="pt")
    prompt = enc.input_ids[0].tolist()
    ids = torch.tensor(prompt + [r["id"] for r in words])
    out = model(ids[None])
    L = model.config.pointer_window
    for k, r in enumerate(words):
        t = len(prompt) + k - 1  # the position that chose the word
        p = out.logits[0, t].double().softmax(-1)[r["id"]]
        window = ids[max(0, t - L + 1) : t + 1]
        a = out.pointer_attention[0, t, L - len(window) :].double()
        pointer = a[window == r["id"]].sum()
        assert r["probability"] == pytest.approx(float(p), abs=1e-5)
        assert r["pointer_share"] == pytest.approx(float(pointer / p), abs=1e-5)
        assert r["gate"] == pytest.approx(float(out.gate[0, t]), abs=1e-5)
        assert r["copied"] == (r["unseen"] or r["pointer_share"] >= app.COPIED)
        assert [w for w, _ in r["window"]][-1] == app.spell(tok, int(ids[t]), enc.oov_words[0])
    assert text == app.continuation(tok, torch.tensor(prompt), [r["id"] for r in words], enc.oov_words[0])
    # the page writes an unseen word in its own spelling (the default folder copies the prompt's name)
    assert any(r["unseen"] for r in words) and all(r["word"] in enc.oov_words[0] for r in words if r["unseen"])
    # the next unused slot, a top next word for its new-word share, is named as such, never as a placeholder
    table, V = enc.oov_words[0], tok.word_vocab_size
    assert app.spell(tok, V + len(table), table) == app.spell(tok, V + 255, table) == app.NEW_WORD
    assert app.spell(tok, V, table) == table[0] and app.spell(tok, tok.eos_token_id, table) == "\n"
    tops = [c["word"] for r in words for c in r["top"]]
    assert app.NEW_WORD in tops and not any(w.startswith("<oov-") for w in tops)


@torch.no_grad()
def test_score_is_the_models_loss(models):
    """Perplexity is exp of the model's loss on the text after <eos>; the pointer's gain is log p - log p_vocab,
    the model's `target_log_probs` - `vocab_target_log_probs`."""
    text = "The Vorlund Bridge crosses the river at Esselbrook. The Vorlund Bridge was opened in 1910. " * 3
    summary, _ = app.score_text(models, POINTER, text)
    model, tok = load(POINTER)
    ids = tok("\n" + text, return_tensors="pt").input_ids
    out = model(ids, labels=ids)
    assert summary["perplexity"] == pytest.approx(float(out.loss.exp()), rel=1e-5)
    gain = (out.target_log_probs - out.vocab_target_log_probs)[0, :-1]
    assert [w["gain"] for w in summary["words_scored"]] == pytest.approx(gain.tolist(), abs=1e-4)
    assert summary["pointer_helped_most"][0]["gain_nats"] == pytest.approx(float(gain.max()), abs=1e-4)
    y = ids[0, 1:]
    assert summary["unseen_word_rate"] == pytest.approx(float(((y >= tok.word_vocab_size) | (y == 4)).float().mean()))
    assert [w["word"] for w in summary["words_scored"]][:3] == ["The", "Vorlund", "Bridge"]


BAD = {
    "empty prompt": lambda m: list(app.generate_words(m, POINTER, "  \n ")),
    "long prompt": lambda m: list(app.generate_words(m, POINTER, "word " * 10_000)),
    "10,000-word text": lambda m: app.score_text(m, POINTER, "word " * 10_000),
    "empty text": lambda m: app.score_text(m, POINTER, ""),
    "max_new_tokens 0": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", 0)),
    "max_new_tokens 201": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", 201)),
    "max_new_tokens 2.5": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", 2.5)),
    "max_new_tokens none": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", None)),
    "temperature 0": lambda m: list(app.generate_words(m, POINTER, PROMPT, "sample", 5, 0)),
    "one beam": lambda m: list(app.generate_words(m, POINTER, PROMPT, "beam", 5, num_beams=1)),
    "mode": lambda m: list(app.generate_words(m, POINTER, PROMPT, "contrastive")),
    "not a model": lambda m: m.get("examples"),
    "outside": lambda m: m.get(str(ROOT / "pretrained" / ".." / "tests")),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_a_message(models, case):
    with pytest.raises(app.InputError) as caught:
        BAD[case](models)
    page = app.failure(caught.value)
    assert 'class="ps-msg"' in page and "Traceback" not in page and len(str(caught.value)) > 20


def test_uploads(tmp_path):
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(app.InputError, match="not a text file"):
        app.read_upload(binary)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Café".encode("latin-1"))
    with pytest.raises(app.InputError, match="not a text file"):
        app.read_upload(latin)
    good = tmp_path / "good.txt"
    good.write_text("The Vorlund Bridge")
    assert app.read_upload(good) == "The Vorlund Bridge"


def test_an_unexpected_failure_is_a_message_too():
    page = app.failure(RuntimeError("boom"))
    assert "boom" in page and "still works" in page and "Traceback" not in page
