"""The page's numbers (examples/app.py, through `modeling_pointer_sentinel.inspection`) are the model's: a word's
vocabulary, pointer and speller parts sum to its probability, and the probability and pointer share the page shows for
a generated word (a spelled word is one word, its bytes' log p summed) are the ones computed from plain forwards over
prompt and continuation; a word is marked copied exactly when the pointer gave at least half of it. The pointer-off
baseline is the same model's forward without its pointer; the top next words never name a word yet to come; a plain
folder says it has no pointer; the page writes running text. Bad input ends in a message."""

import copy
import importlib
import math
import os
import sys

import pytest
import torch
from conftest import ROOT
from transformers import AutoModelForCausalLM, AutoTokenizer

from modeling_pointer_sentinel.inspection import explain, spelling_log_prob, word_model, word_steps
from modeling_pointer_sentinel.spelling import spelled_words


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
PTB_PLAIN = "pretrained/ptb-lstm-2x200"
PROMPT = "\nThe ship Kestrelwind sailed to Norway. The Kestrelwind was sunk in 1940. The"
# sampled from the page's prompt (top_k 40), the pointer folder coins `Mernold`, then copies it twice
COINING, COINING_SEED, COINED = app.PROMPT, 22, "Mernold"


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(1)
    return app.Models()


def load(folder):
    model = AutoModelForCausalLM.from_pretrained(ROOT / folder, trust_remote_code=True, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(ROOT / folder, trust_remote_code=True)


def word_level(folder, text):
    """The folder's model, tokenizer, the text's ids, its word steps (the model's own reading) and the word-level
    twin's forward over them."""
    model, tok = load(folder)
    ids = tok(text)["input_ids"]
    steps = word_steps(model, ids)[0]
    twin = word_model(model)
    return model, tok, ids, steps, twin, twin(torch.tensor([steps]))


@pytest.mark.parametrize("folder", [POINTER, PTB_POINTER, PLAIN, PTB_PLAIN])
@torch.no_grad()
def test_parts_sum_to_the_probability(folder):
    """For every top word and every target of the word-level forward (a spelling folder's twin over its word steps):
    vocabulary part (g p_vocab) + pointer part (the window's attention on it) = p(w) of the model's logits, to 1e-5;
    <unk> and the unseen words share <unk>'s vocabulary mass."""
    model, tok, _, ids, twin, out = word_level(folder, PROMPT + " Kestrelwind was sunk by the Vorlund .")
    ids = torch.tensor(ids)
    e = explain(out, ids, twin, torch.cat([ids[1:], ids[:1]]), top_k=50)
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
        return explain(out, ids, twin, ids.new_full((len(ids),), w)).target_vocab

    columns = [w for w in range(V, p.shape[-1]) if (p[:, w] > 0).any()]
    share = vocab_part(unk) + sum(torch.where(p[:, w] > 0, vocab_part(w), 0.0) for w in columns)
    assert torch.allclose(share, out.gate[0].double() * pv[:, unk], atol=1e-6)
    if not model.config.use_pointer:
        assert (e.gate == 1).all() and (e.top_pointer == 0).all()


def last(steps):
    *_, final = ((), [], "", ""), *steps
    return final


@torch.no_grad()
def reference(folder, prompt_ids, words):
    """Each generated word's p, pointer part, copy mass and gate from plain forwards over prompt + continuation: the
    folder's model (p: its tokens' log p summed) and the word-level twin over the word steps (the pointer's
    attention on the window's copies of the word, and the word's column where the window holds it)."""
    model, tok = load(folder)
    ids = prompt_ids + [i for r in words for i in r["ids"]]
    log_p = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    steps = word_steps(model, ids)[0]
    twin = word_model(model)
    out = twin(torch.tensor([steps]))
    L, V, n = model.config.pointer_window, model.config.vocab_size, len(steps) - len(words)
    rows, pos = [], len(prompt_ids)
    for k, r in enumerate(words):
        p = sum(float(log_p[pos + j - 1, i]) for j, i in enumerate(r["ids"]))
        pos += len(r["ids"])
        t, w = n + k - 1, steps[n + k]  # the word position that chose the word, its word-level id
        window = torch.tensor(steps[max(0, t - L + 1) : t + 1])
        a = out.pointer_attention[0, t, L - len(window) :].double()
        held = bool((window == w).any()) and model.config.use_pointer
        column = float(out.logits[0, t].double().softmax(-1)[w]) if held else 0.0
        rows.append({"p": math.exp(p), "pointer": float(a[window == w].sum()) if held else 0.0, "copy": column,
                     "gate": float(out.gate[0, t]), "spelled": w >= V and bool(model.config.speller_size)})  # fmt: skip
    return rows


@pytest.mark.parametrize("folder", [POINTER, PLAIN])
@torch.no_grad()
def test_the_pages_pointer_share_is_the_models(models, folder):
    """Each generated word's record (what the page colours and shows) against plain forwards of the model over prompt
    + continuation: p(w) (a spelled word's bytes and `</w>` summed), its pointer part and the share, to 1e-5; the
    gate; a spelled word's speller part is p less the copies of it the window holds; the parts sum to p. A word is
    underlined as copied exactly when the pointer gave at least half of it."""
    words = last(app.generate_words(models, folder, COINING, "sample", 60, 1.0, 40, 1.0, 4, COINING_SEED))[1]
    model, tok = load(folder)
    prompt = tok(COINING)["input_ids"]
    for r, ref in zip(words, reference(folder, prompt, words), strict=True):
        assert r["probability"] == pytest.approx(ref["p"], rel=1e-5)
        assert r["pointer"] == pytest.approx(ref["pointer"], abs=1e-5)
        assert r["gate"] == pytest.approx(ref["gate"], abs=1e-5)
        assert r["vocabulary"] + r["pointer"] + r["speller"] == pytest.approx(ref["p"], rel=1e-4, abs=1e-9)
        if ref["spelled"]:  # a copy's speller part is far below float32's resolution of p: to p's precision there
            assert r["speller"] == pytest.approx(ref["p"] - ref["copy"], rel=1e-4, abs=1e-6 * ref["p"])
        assert r["copied"] == (ref["pointer"] / ref["p"] >= 0.5)
    assert (
        "".join(r["text"] for r in words)
        == tok.decode(prompt + [i for r in words for i in r["ids"]])[len(tok.decode(prompt)) :]
    )


@torch.no_grad()
def test_a_coined_word_is_spelled_then_copied(models):
    """The pointer folder (spelling) coins a word, new to the text and the vocabulary: written by the speller (no
    pointer part, not underlined) and streamed as its bytes arrive; later it is a copy, the pointer's. The top next
    words show the speller's share beside the vocabulary and pointer parts."""
    steps = list(app.generate_words(models, POINTER, COINING, "sample", 60, 1.0, 40, 1.0, 4, COINING_SEED))
    words = steps[-1][1]
    coined = next(r for r in words if r["coined"] and r["word"] == COINED)
    assert coined["kind"] == "new" and coined["pointer"] == 0 and not coined["copied"]
    assert coined["speller"] == pytest.approx(coined["probability"], rel=1e-4)
    copies = [r for r in words if r["word"] == COINED and r is not coined]
    assert copies and all(r["kind"] == "copy" and r["copied"] and not r["coined"] for r in copies)
    # while its bytes arrive, the word being spelled is shown as what they spell so far
    partial = [pending.strip() for *_, pending in steps if pending.strip()]
    assert any(0 < len(p) < len(COINED) and COINED.startswith(p) for p in partial)
    tops = [c for r in words for c in r["top"]]
    assert any(c["word"] == app.NEW_WORD and c["speller"] > 0 for c in tops)
    assert any(c["word"] == COINED and c["pointer"] > 0 and c["speller"] > 0 for c in tops)
    assert all(c["vocabulary"] + c["pointer"] + c["speller"] == pytest.approx(c["probability"], abs=1e-6)
               for c in tops)  # fmt: skip


NAMES = (
    "Tarrabee's house at Brindlemoor stood by the Quell. Tarrabee sold Brindlemoor in 1910, and the Quell flooded it."
)


@pytest.mark.parametrize("folder", [POINTER, PLAIN])
@torch.no_grad()
def test_score_is_the_models_loss(models, folder):
    """Word perplexity is exp of the model's loss per word on the text after <eos> (a spelled word's bytes summed,
    grouped by the package's `spelled_words`), the kinds are `spelled_words`' (copy: the window holds it), and the
    pointer's gain is log p - log p of the same model with the pointer off: the twin run without its pointer, whose
    new-word mass times p_spell is what it gives an unseen word (not all of p_vocab(<unk>))."""
    summary, (reading, m, log_p, log_spell) = app.score_text(models, folder, NAMES * 2)
    model, tok = load(folder)
    ids = tok("\n" + NAMES * 2, return_tensors="pt").input_ids
    out = model(ids, labels=ids)
    V, L = model.config.vocab_size, model.config.pointer_window
    words = summary["words_scored"]
    if model.config.speller_size:
        owner, kinds, _ = spelled_words(ids[0].tolist(), V, L)
        kinds = [k if model.config.use_pointer or k != "copy" else "new" for k in kinds]  # no pointer: no copy
    else:
        owner = torch.arange(ids.shape[1])
        kinds = ["vocabulary" if i < V else "copy" if model.config.use_pointer and i in ids[0, max(0, k - L) : k]
                 else "new" for k, i in enumerate(ids[0].tolist())]  # fmt: skip
    nats = torch.zeros(int(owner[-1]) + 1, dtype=torch.float64).index_add_(
        0, owner[1:], -out.target_log_probs[0, :-1].double()
    )[1:]
    assert summary["perplexity"] == pytest.approx(float(nats.mean().exp()), rel=1e-5)
    assert [w["kind"] for w in words] == kinds[1:]
    assert "".join(w["text"] for w in words) == tok.decode(ids[0, 1:])  # running text, not corpus form
    # the pointer off: the same twin without its pointer head, read by its own forward
    twin = word_model(model)
    off = copy.copy(twin)
    off._modules = dict(twin._modules)
    off.pointer = None
    steps = torch.tensor([reading.steps])
    log_off = torch.log_softmax(off(steps).logits[0].double(), -1)
    hidden = twin(steps).last_hidden_state[0]
    for t, w in enumerate(words):
        s = reading.steps[t + 1]
        if reading.spelled and s >= V:  # the speller's word after the twin's h_t, in the model without the pointer
            h = hidden[t : t + 1]
            ref = float(log_off[t, V:].logsumexp(-1)) + float(spelling_log_prob(model, h, [reading.spelling(t + 1)])[0])
        else:
            ref = float(log_off[t, s])
        assert w["gain"] == pytest.approx(-w["surprisal_bits"] * math.log(2) - ref, abs=1e-4)
    if model.config.use_pointer:  # the repeated names are where the pointer helped most
        helped = {h["word"] for h in summary["pointer_helped_most"][:5]}
        assert helped <= {"Tarrabee", "Brindlemoor", "Quell"} and len(helped) >= 2
        assert all(h["gain_nats"] > 1 for h in summary["pointer_helped_most"][:5])
    else:
        assert summary["pointer_helped_most"] == []


@pytest.mark.parametrize("folder", [POINTER, PLAIN])
@torch.no_grad()
def test_the_top_next_words_name_no_word_yet_to_come(models, folder):
    """At every word of a scored text, the top next words name only words the vocabulary holds or the text has shown
    by then (a slot the text has not used yet is the new word, whatever word later takes it); `<unk>` says what it
    stands for."""
    text = "The Quell rose. Brindlemoor and Tarrabee came. " + NAMES
    summary, (reading, m, log_p, log_spell) = app.score_text(models, folder, text)
    words = [w["word"] for w in summary["words_scored"]]
    unseen = {w["word"] for w in summary["words_scored"] if w["kind"] != "vocabulary"}
    labels = set()
    for t in range(len(words)):
        shown = set(words[: t + 1])
        for c in reading.record(m, t, t + 1, log_p[t], log_spell[t])["top"]:
            labels.add(c["word"])
            assert c["word"] not in unseen or c["word"] in shown, (t, c["word"])
    assert app.NEW_WORD in labels and not any(w.startswith("<oov-") for w in labels)
    assert app.UNK_WORD in labels and all(w == app.UNK_WORD for w in labels if w.startswith("<unk>"))


def test_a_plain_folder_says_it_has_no_pointer(models):
    """A plain LSTM folder: the page says it has no pointer, names its pointer twin (Generate compares them), and
    its moments show neither a gate nor a window."""
    for plain, pointer in ((PLAIN, POINTER), (PTB_PLAIN, PTB_POINTER)):
        assert "no pointer" in app.describe(models, plain) and pointer in app.describe(models, plain)
        assert models.partner(plain) == pointer and models.partner(pointer) == plain
    words = last(app.generate_words(models, PLAIN, PROMPT, "greedy", 5))[1]
    page = app.moment_html(words[0])
    assert "no pointer" in page and "gate g" not in page and "ps-window" not in page
    assert "gate g = " in app.moment_html(last(app.generate_words(models, POINTER, PROMPT, "greedy", 20))[1][0])
    compare = app.compare_html(PLAIN, "a", POINTER, "b", has_pointer=False)
    assert compare.index(POINTER) < compare.index(PLAIN) and "no pointer" in compare


def test_the_page_writes_running_text(models):
    """The prompt, the continuation and the scored text as running text: `Brindlemoor.` and `Tarrabee's`, not the
    corpus's `Brindlemoor .` and `Tarrabee 's`."""
    prompt = "\nTarrabee's house at Brindlemoor. Tarrabee"
    pieces, words, text, _ = last(app.generate_words(models, POINTER, prompt, "greedy", 20))
    page = app.words_html(pieces, words)
    assert "Tarrabee&#x27;s house at Brindlemoor. Tarrabee" in page and "Brindlemoor ." not in page
    summary, _ = app.score_text(models, POINTER, prompt)
    assert "Tarrabee&#x27;s house at Brindlemoor." in app.score_html(summary)


BAD = {
    "empty prompt": lambda m: list(app.generate_words(m, POINTER, "  \n ")),
    "long prompt": lambda m: list(app.generate_words(m, POINTER, "word " * 10_000)),
    "10,000-word text": lambda m: app.score_text(m, POINTER, "word " * 10_000),
    "empty text": lambda m: app.score_text(m, POINTER, ""),
    "max_new_tokens 0": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", 0)),
    "max_new_tokens 201": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", 201)),
    "max_new_tokens 2.5": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", 2.5)),
    "max_new_tokens none": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", None)),
    "seed 1e30": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", 5, seed=1e30)),
    "seed 3.7": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", 5, seed=3.7)),
    "seed empty": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", 5, seed=None)),
    "temperature empty": lambda m: list(app.generate_words(m, POINTER, PROMPT, "greedy", 5, temperature=None)),
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
