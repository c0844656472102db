"""examples/export_onnx.py and examples/onnx_generate.py on a folder with a speller (`config.speller_size`, the ids
carry the text): the word step and the byte step export as two graphs of the model's own `spelled_word_step` and
`spelled_byte_step`; the runner's scores equal forward's over 500 sampled steps that spell new words and copy them,
its greedy tokens equal generate's on prompts with unseen words, its slots are the model's, and int8 carries the
speller."""

import json
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT
from test_onnx import run_without_torch
from test_spelled_forward import spelling_pair

from modeling_pointer_sentinel.modeling_pointer_sentinel import SPELL_END, SpelledRow

sys.path.insert(0, str(ROOT / "examples"))
import export_onnx  # noqa: E402
import onnx_generate  # noqa: E402

PROMPTS = ["the Zorbane ship was sunk in the bay . the Zorbane", "a Kelpravia crew was saved by Kelpravia"]

LOWEST = np.finfo(np.float32).min  # forward's mark of a column that cannot occur (-inf in the steps)


@pytest.fixture(scope="module")
def spelled(tmp_path_factory):
    """A tiny spelling model that writes short new words and copies (`<unk>`'s share large, the sentinel high enough
    that new words come between the copies), saved with its spelling tokenizer as the shipped folders are (no end
    token, `<unk>` suppressed) and exported."""
    src, out = tmp_path_factory.mktemp("spelled_model"), tmp_path_factory.mktemp("spelled_onnx")
    tok, m = spelling_pair(src)
    with torch.no_grad():
        m.speller.out.bias[SPELL_END] = 5.0  # words of a few bytes, so that a sample holds several
        m.pointer.sentinel.fill_(2.0)  # copies, and new words between them
    m.generation_config.eos_token_id, m.generation_config.suppress_tokens = None, [tok.unk_token_id]
    m.save_pretrained(src)
    export_onnx.main([str(src), str(out), "--int8", "--check_steps", "500"])
    return m, tok, out


def words_of(ids: list[int], V: int) -> list:
    """The words of spelled ids: a vocabulary id, or a spelled word's symbols (closed by `</w>`)."""
    words, word = [], []
    for t in ids:
        if t >= V and t - V != SPELL_END:
            word.append(t)
        elif t - V == SPELL_END:
            words.append(tuple(word))
            word = []
        else:
            words.append(t)
    return words


def test_export_reports_parity_over_sampled_steps_that_spell_and_copy(spelled):
    """export.json: the script's own check (500 steps sampled after a prompt with made-up names, PyTorch's spelled
    decode step against the two graphs) agrees to 1e-4, its samples spell words, some new and some repeated."""
    m, _, out = spelled
    report = json.loads((out / "export.json").read_text())
    parity = report["parity"]
    assert parity["steps"] == 500 and parity["max_abs_log_prob_diff"] <= 1e-4
    assert parity["of_which_repeats"] >= 1 and parity["spelled_words_sampled"] > parity["of_which_repeats"]
    assert set(report["inputs"]) == {"word_step", "byte_step"} and "spelling" in report["inputs"]["word_step"]
    assert all((out / f).is_file() for f in ("spell_step.onnx", "spell_step.int8.onnx", "spell_start.npz"))


def test_runner_scores_equal_forward_over_500_sampled_steps_with_new_and_copied_words(spelled):
    """The runner samples 500 tokens after a prompt with unseen words; at every position of prompt + sample its log p
    (V + 258 columns) equals one forward over the whole sequence to 1e-4, and the sample spells words of its own and
    repeats spelled words inside the window (copies)."""
    m, tok, out = spelled
    V, L = m.config.vocab_size, m.config.pointer_window
    lm = onnx_generate.OnnxPointerSentinel(out)
    prompt = lm.encode(PROMPTS[0])[0]
    new = lm.generate([prompt], 500, do_sample=True, seed=0)[0]
    ids = prompt + new
    with torch.no_grad():
        want = m(torch.tensor([ids])).logits[0].numpy()
    state, got = lm.empty_state(1), []
    for t in ids:
        log_p, state = lm.step(np.array([t]), state)
        got.append(log_p[0])
    got = np.maximum(np.stack(got), LOWEST)  # forward's `logits` hold the lowest float where the steps hold -inf
    finite = want > LOWEST
    assert got.shape == (len(ids), V + 258) and np.array_equal(got > LOWEST, finite)
    assert np.abs(got[finite] - want[finite]).max() <= 1e-4
    words, before = words_of(new, V), words_of(prompt, V)
    spelled_words = [w for w in words if isinstance(w, tuple)]
    history = before + words
    copies = [w for i, w in enumerate(words, len(before)) if isinstance(w, tuple) and w in history[max(0, i - L) : i]]
    fresh = [w for w in spelled_words if w not in before]
    assert len(copies) >= 3 and len(set(fresh)) >= 3, (len(copies), len(set(fresh)))


def test_runner_from_the_empty_state_scores_long_new_words_as_forward(spelled):
    """From the state before the first token (spell_start.npz: the speller started from a zero h_t) the runner gives
    forward's scores at every position of a text that starts with a word the vocabulary lacks and holds a name long
    enough that its spelling's log probability passes float32's least normal (-87), and one of 70 bytes (over 64:
    spelled in two pieces, `<+w>` between; over K: never copied)."""
    m, _, out = spelled
    lm = onnx_generate.OnnxPointerSentinel(out)
    name = "Qwertzuiopasdfghjklyxcvbnm"
    ids = lm.encode(f"Zorbane was sunk by the {name} {'x' * 70} Zorbane {name}")[0]
    V = m.config.vocab_size
    assert ids[0] >= V and V + 257 in ids
    state, got = lm.empty_state(1), []
    for t in ids:
        log_p, state = lm.step(np.array([t]), state)
        got.append(log_p[0])
    got = np.stack(got)
    with torch.no_grad():
        want = m(torch.tensor([ids])).logits[0].numpy()
    got, finite = np.maximum(got, LOWEST), want > LOWEST  # as above
    assert want[finite].min() < -87  # some scores below float32's least normal
    assert np.array_equal(got > LOWEST, finite) and np.abs(got[finite] - want[finite]).max() <= 1e-4


@pytest.mark.parametrize("int8", [False, True])
def test_runner_greedy_equals_generate_on_prompts_with_unseen_words(spelled, int8):
    """Two prompts with names the vocabulary lacks, as one batch in the runner (each row stepped on its own) and one
    by one in generate: the same tokens (fp32; int8 the first tokens at least), and the second prompt's name copied,
    spelled."""
    m, tok, out = spelled
    lm = onnx_generate.OnnxPointerSentinel(out, int8=int8)
    prompts = [lm.encode(p)[0] for p in PROMPTS]
    got = lm.generate(prompts, 40)
    for prompt, row in zip(prompts, got, strict=True):
        ids = torch.tensor([prompt])  # the mask given: a prompt's word may share the padding's id
        want = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40, do_sample=False,
                          pad_token_id=tok.pad_token_id)  # fmt: skip
        want = want[0, len(prompt) :].tolist()
        assert row[:5] == want[:5] if int8 else row == want
    assert SPELL_END + m.config.vocab_size in got[1]
    assert lm.text(PROMPTS[1], prompts[1], got[1], []).count("Kelpravia") > 2


def test_runner_writes_new_words_and_the_prompts_names_in_text_without_torch(spelled):
    """Sampled text from the command line in a process without torch: the prompt's unseen name written again (no
    table: the ids carry it), words the vocabulary lacks written, no <unk> and no byte token's name."""
    _, tok, out = spelled
    done = run_without_torch(out, "--prompt", PROMPTS[0], "--max_new_tokens", "120", "--do_sample", "--seed", "0")
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout[len(PROMPTS[0]) :]
    assert done.stdout.startswith(PROMPTS[0]) and "Zorbane" in text, text
    vocab = set(tok.get_vocab())
    assert any(w not in vocab and w != "Zorbane" for w in text.split()), text
    assert "<unk>" not in text and "</w>" not in text and "<0x" not in text


def test_runner_slots_are_the_models_slots():
    """`SpelledWords.slot` (the runner's, without torch) gives the model's `SpelledRow.slot` on a stream of more
    distinct words than slots, repeats included: the least recent word's slot is reused alike."""
    rng, n = np.random.default_rng(0), 8
    mine, theirs = onnx_generate.SpelledWords(), SpelledRow()
    for w in rng.integers(0, 20, 300).tolist():
        assert mine.slot((w, SPELL_END), n) == theirs.slot((w, SPELL_END), n)


def test_int8_carries_the_speller(spelled):
    """Both int8 graphs hold the speller's matrices in int8 and no float32 copy: the byte step its LSTM's
    [W_ih | W_hh], its output layer and its byte embedding; the word step, whose speller reads the start symbol (its
    input gates a constant), W_hh and the output layer (its cost in perplexity: tests/test_onnx.py's shipped
    WikiText-2 folder, which has a speller; this tiny model's made-up sentinel, all 2.0, makes its gate the int8
    rounding's worst case)."""
    import onnx
    from onnx import numpy_helper

    m, _, out = spelled
    S = m.config.speller_size
    for name, shapes, n in (("decode_step.int8.onnx", [(S, 4 * S), (S, 258)], 2),
                            ("spell_step.int8.onnx", [(2 * S, 4 * S), (S, 258)], 3)):  # fmt: skip
        tables = [numpy_helper.to_array(i) for i in onnx.load(str(out / name)).graph.initializer]
        speller = [t for t in tables if tuple(sorted(t.shape)) in shapes]
        assert [t.dtype for t in speller] == [np.dtype(np.int8)] * n, name


def test_a_folder_without_a_speller_exports_one_graph(tmp_path):
    """The word-level export is unchanged: one graph, no speller files."""
    from test_onnx import saved_tiny

    saved_tiny(tmp_path / "model", tie_word_embeddings=True)
    export_onnx.main([str(tmp_path / "model"), str(tmp_path / "onnx"), "--check_steps", "5"])
    assert sorted(p.name for p in (tmp_path / "onnx").glob("*.onnx")) == ["decode_step.onnx"]
    assert not (tmp_path / "onnx" / "spell_start.npz").exists()
    assert onnx_generate.OnnxPointerSentinel(tmp_path / "onnx").spelled is None


@pytest.fixture(scope="module")
def page_steps(spelled, tmp_path_factory):
    """The tiny model's steps as export_web.py exports them before its page forms: the word step with the pointer's
    view, the byte step with a window of dynamic length (`window=True`), and their weight-only int8 forms."""
    m, _, _ = spelled
    out = tmp_path_factory.mktemp("page_steps")
    export_onnx.export(m, out / "decode_step.onnx", inspect=True, window=True)
    for graph in (out / "decode_step.onnx", export_onnx.spell_path(out / "decode_step.onnx")):
        export_onnx.quantize_weights(graph, graph.with_name(graph.name.replace(".onnx", ".int8.onnx")), SMALL)
    return out


SMALL = 256  # the tiny model's matrices are small: quantize those of 256 values or more (export_web.py: 4,096)


def page_session(path):
    """A session as the page makes it: the int8 weights folded into float32 at load (`disable_quant_qdq`)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def page_runner(m, page_steps, suffix: str = ""):
    """onnx_generate's runner on the page's steps (`suffix` ".int8": their weight-only int8 forms)."""
    return onnx_generate.SpelledSteps(page_session(page_steps / f"decode_step{suffix}.onnx"),
                                      page_session(page_steps / f"spell_step{suffix}.onnx"), m.config.vocab_size,
                                      m.config.oov_slots, dict(np.load(page_steps / "spell_start.npz")))  # fmt: skip


def test_the_byte_step_over_the_held_slots_alone_gives_the_whole_windows_log_p(spelled, page_steps):
    """With `window=True` the byte step takes any number of window slots: given only the slots that hold a word to
    copy (copy mass above -inf; one empty slot when none does), as the page passes them, its log p and speller state
    are the whole window's (to float rounding), at every byte of a text that copies spelled words."""
    m, _, out = spelled
    V = m.config.vocab_size
    steps = page_runner(m, page_steps)
    ids = onnx_generate.OnnxPointerSentinel(out).encode(f"{PROMPTS[0]} was saved by Kelpravia and the Zorbane")[0]
    state, checked, held_any = steps.empty(), 0, False
    for t in ids:
        if V <= t < V + SPELL_END:  # a byte: the whole window, then its held slots alone
            feed = {n: state[n] for n in steps.byte_in if n != "input_ids"} | {"input_ids": np.array([t])}
            copy = feed["copy_log_mass"][0]
            held = np.flatnonzero(copy > -np.inf)
            keep = held if held.size else np.array([0])
            part = dict(feed, window_spellings=feed["window_spellings"][:, keep], copy_log_mass=copy[None, keep])
            if not held.size:
                part["copy_log_mass"] = np.full((1, 1), -np.inf, np.float32)
            whole, few = steps.byte.run(None, feed), steps.byte.run(None, part)
            for a, b in zip(whole, few, strict=True):
                assert np.array_equal(np.isfinite(a), np.isfinite(b)) and np.allclose(a, b, atol=1e-5, equal_nan=True)
            checked, held_any = checked + 1, held_any or held.size > 0
        steps.step(t, state)
    assert checked >= 10 and held_any


def test_the_word_step_over_its_spelled_slots_alone_gives_the_whole_windows_log_p(spelled, page_steps):
    """With `window=True` the word step's first-byte mixture reads the ring slots in `held_slots` alone: given those
    whose ids are spelled words, the word's own slot included (as `SpelledSteps` and the page give them), its log p
    and every output are those of all L slots (to float rounding), at every word of a text that repeats a spelled
    word at once and later."""
    m, _, out = spelled
    L = m.config.pointer_window
    steps = page_runner(m, page_steps)
    assert "held_slots" in steps.word_in
    real = steps.word.run
    text = f"{PROMPTS[0]} Zorbane was saved by Kelpravia and the Zorbane"
    ids, checked, fewer = onnx_generate.OnnxPointerSentinel(out).encode(text)[0], 0, 0

    def both(names, feed):  # the step as SpelledSteps feeds it, and over every slot
        few, whole = real(names, feed), real(names, dict(feed, held_slots=np.arange(L)))
        for a, b in zip(few, whole, strict=True):
            assert np.array_equal(np.isfinite(a), np.isfinite(b)) and np.allclose(a, b, atol=1e-5, equal_nan=True)
        nonlocal checked, fewer
        checked, fewer = checked + 1, fewer + (len(feed["held_slots"]) < L)
        return few

    steps.word.run, state = both, steps.empty()
    try:
        for t in ids:
            steps.step(t, state)
    finally:
        steps.word.run = real
    assert checked >= 15 and fewer == checked


def test_weight_only_int8_stores_int8_and_stays_near_float32(spelled, page_steps):
    """`quantize_weights`: every float matrix of `SMALL` values or more stored as int8 with its DequantizeLinear (no
    float copy, no dynamic quantization), which the runtime folds at load; the word step's log p stays within int8's
    rounding of the float32 graph's over a text that spells and copies, the same argmax nearly everywhere."""
    import onnx
    from onnx import numpy_helper

    m, _, out = spelled
    for name in ("decode_step.int8.onnx", "spell_step.int8.onnx"):
        graph = onnx.load(str(page_steps / name)).graph
        tables = [numpy_helper.to_array(i) for i in graph.initializer]
        assert not [t for t in tables if t.dtype == np.float32 and t.ndim == 2 and t.size >= SMALL], name
        assert [t for t in tables if t.dtype == np.int8 and t.size >= SMALL], name
        ops = {n.op_type for n in graph.node}
        assert "DequantizeLinear" in ops and not ops & {"DynamicQuantizeLinear", "MatMulInteger"}, name
    runs = [page_runner(m, page_steps, s) for s in ("", ".int8")]
    ids = onnx_generate.OnnxPointerSentinel(out).encode(f"{PROMPTS[0]} was saved by Kelpravia and the Zorbane")[0]
    states, worst, same = [r.empty() for r in runs], 0.0, 0
    for t in ids:
        a, b = (r.step(t, s)[0] for r, s in zip(runs, states, strict=True))
        finite = np.isfinite(a)
        assert np.array_equal(finite, np.isfinite(b))
        worst, same = max(worst, float(np.abs(a - b)[finite].max())), same + (a.argmax() == b.argmax())
    assert worst < 0.1 and same >= len(ids) - 2, (worst, same, len(ids))
