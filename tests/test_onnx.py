"""examples/export_onnx.py and examples/onnx_generate.py: the exported decode step equals PyTorch's over 500 steps,
also over text with placeholders for out-of-vocabulary words (config.oov_slots), the torch-free runner decodes the
tokens generate() decodes and writes the text pipeline("text-generation") writes, copied words included, and int8
keeps the shipped model's perplexity."""

import json
import lzma
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import ROOT, oov_heads_counting, tiny_model

from modeling_pointer_sentinel import PointerSentinelForCausalLM
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

sys.path.insert(0, str(ROOT / "examples"))
import export_onnx  # noqa: E402
import onnx_generate  # noqa: E402

VARIANTS = {
    "sentinel": dict(tie_word_embeddings=True),
    "adaptive": dict(adaptive_softmax_cutoffs=[4, 10], adaptive_softmax_div_value=2.0),
    "switch_zoneout": dict(gate_type="switch", zoneout=0.3, tie_word_embeddings=False, hidden_size=10),
    "plain": dict(use_pointer=False),
}
WORDS = "a b c d e f g h i j k l m n o p q r s t u".split()
EOS, UNK = 21, 22
N = 4  # the open variants' placeholders: ids 23 ... 26
OPEN = {f"open_{name}": {**kw, "oov_slots": N, "unk_token_id": UNK} for name, kw in VARIANTS.items()}
# the placeholders' own embedding and query (config.oov_pointer)
OPEN["open_oov_pointer"] = {"oov_slots": N, "unk_token_id": UNK, "oov_pointer": True}

LOWEST = np.finfo(np.float32).min  # forward's mark of a column that cannot occur (-inf in the steps)


def saved_tiny(folder, **kw):
    """A tiny model (window 6) and a word-level tokenizer over 21 words (+ <eos>, <unk>: V = 23), saved."""
    tok = build_word_level_tokenizer([" ".join(WORDS)])
    assert len(tok) == 23 and (tok.eos_token_id, tok.convert_tokens_to_ids("<unk>")) == (EOS, UNK)
    m = tiny_model(pointer_window=6, eos_token_id=EOS, pad_token_id=EOS, **kw).eval()
    oov_heads_counting(m)
    m.generation_config.suppress_tokens = [UNK]
    m.save_pretrained(folder)
    tok.save_pretrained(folder)
    return m, tok


class Exports(dict):
    """Each variant saved and exported (fp32 and int8) once for the module, when a test first asks for it."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        self.tmp = tmp_path_factory

    def __missing__(self, name):
        src, out = self.tmp.mktemp(f"{name}_model"), self.tmp.mktemp(f"{name}_onnx")
        m, tok = saved_tiny(src, **{**VARIANTS, **OPEN}[name])
        export_onnx.main([str(src), str(out), "--int8", "--check_steps", "500"])
        self[name] = (m, tok, out)
        return self[name]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return Exports(tmp_path_factory)


@pytest.mark.parametrize("variant", [*VARIANTS, *OPEN])
def test_onnx_log_probs_match_pytorch_over_500_steps(exported, variant):
    m, tok, out = exported[variant]
    report = json.loads((out / "export.json").read_text())
    assert report["parity"]["steps"] == 500 and report["parity"]["max_abs_log_prob_diff"] <= 1e-4
    # the script's check reads placeholders where the model has them
    assert any(i >= 23 for i in export_onnx.parity_prompt(m, tok)) == (variant in OPEN)
    # and independently of the script's own check: the step against the model's forward with its cache
    lm, cache = onnx_generate.OnnxPointerSentinel(out), None
    state, ids = lm.empty_state(2), torch.tensor([[3, 7], [9, 1], [4, 4], [5, 20]])
    for t in range(ids.shape[0]):
        want = m(ids[t][:, None], past_key_values=cache, use_cache=True)
        cache = want.past_key_values
        got, state = lm.step(ids[t].numpy(), state)
        want = want.logits[:, -1] if m.pointer is not None else torch.log_softmax(want.logits[:, -1], -1)
        # forward's `logits` hold the lowest float where the step's log probs hold -inf (a column that cannot occur)
        np.testing.assert_allclose(np.maximum(got, LOWEST), want.detach().numpy(), atol=1e-5, rtol=1e-5)


# Row 0 repeats placeholders 23 and 24 beside a literal <unk>; row 1 holds its own; both run past the window. Slots
# in order of first occurrence, as the tokenizer numbers them.
OOV_SEQ = torch.tensor(
    [[1, 23, 2, 24, UNK, 23, 5, 24, 1, 25, 26, 23, 7, 23], [EOS, 23, 2, 24, 23, 3, 25, 2, 24, 1, 1, 9, 23, 4]]
)


@pytest.mark.parametrize("variant", OPEN)
def test_onnx_equals_forward_and_decode_step_over_text_with_placeholders(exported, variant):
    """At every step of two rows holding placeholders, the graph's V + N scores (copies of placeholders, <unk>'s share
    split between them and a new word) equal forward's mixture over the whole sequence and PyTorch's decode step; the
    int8 graph scores the same entries, close to fp32."""
    m, _, out = exported[variant]
    with torch.no_grad():
        want = m(OOV_SEQ).logits
    want = want if m.pointer is not None else torch.log_softmax(want, -1)
    graph, torch_state = export_onnx.DecodeStepGraph(m).eval(), export_onnx.empty_state(m, 2)
    lm, lm8 = onnx_generate.OnnxPointerSentinel(out), onnx_generate.OnnxPointerSentinel(out, int8=True)
    state, state8, worst8 = lm.empty_state(2), lm8.empty_state(2), 0.0
    for t in range(OOV_SEQ.shape[1]):
        ids = OOV_SEQ[:, t]
        with torch.no_grad():
            step, *torch_state = graph(ids, *torch_state)
        got, state = lm.step(ids.numpy(), state)
        got8, state8 = lm8.step(ids.numpy(), state8)
        assert got.shape == (2, 23 + N)
        np.testing.assert_allclose(np.maximum(got, LOWEST), want[:, t].numpy(), atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(got, step.numpy(), atol=1e-5, rtol=1e-5)
        finite = np.isfinite(got)
        assert np.array_equal(np.isfinite(got8), finite)
        worst8 = max(worst8, float(np.abs(got8[finite] - got[finite]).max()))
        if t + 1 < OOV_SEQ.shape[1]:  # every next token scored, a first occurrence included
            assert np.isfinite(got[[0, 1], OOV_SEQ[:, t + 1].numpy()]).all()
    assert worst8 < 0.05
    # every row's slots are scored (copies, or the new word's share, `new_word`), the plain LSTM's too
    assert np.isfinite(got[:, 23:]).any(-1).all()


@pytest.mark.parametrize("variant", ["sentinel", "adaptive", "plain"])
def test_runner_greedy_equals_generate(exported, variant):
    """Rows of different lengths (left-padded in PyTorch, prefilled apart in the runner), <unk> suppressed, rows
    ending at <eos> at different steps."""
    m, tok, out = exported[variant]
    prompts = [[EOS, 5, 6, 7, 5, 6], [EOS, 9], [EOS, 3, 4, 3, 4, 3, 4, 3, 4, 11]]
    width = max(map(len, prompts))
    ids = torch.tensor([[EOS] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    want = m.generate(ids, attention_mask=mask, max_new_tokens=25, do_sample=False)[:, width:].tolist()
    want = [row[: row.index(EOS) + 1] if EOS in row else row for row in want]
    got = onnx_generate.OnnxPointerSentinel(out).generate(prompts, max_new_tokens=25)
    assert got == want
    assert any(len(row) < 25 for row in want) or variant != "sentinel"  # a row ended at <eos>


def test_int8_file_holds_one_int8_table_for_tied_weights(exported):
    """The tied embedding is the output matrix: the int8 file keeps one int8 copy of it and no fp32 one."""
    import onnx
    from onnx import numpy_helper

    m, _, out = exported["sentinel"]
    assert m.lm_head.weight is m.model.embed_tokens.weight
    V, E = m.model.embed_tokens.weight.shape
    tables = [numpy_helper.to_array(i) for i in onnx.load(str(out / "decode_step.int8.onnx")).graph.initializer]
    tables = [t for t in tables if t.size == V * E]
    assert len(tables) == 1 and tables[0].dtype == np.int8


def test_rows_prefilled_apart_step_as_one_batch(exported):
    """Stacked rows (their rings rotated to a shared slot) give each row's own next step."""
    lm = onnx_generate.OnnxPointerSentinel(exported["sentinel"][2])
    prompts = [[EOS, 5, 6, 7, 5, 6], [EOS, 9], [EOS, 3, 4, 3, 4, 3, 4, 3, 4, 11]]  # slots 0, 2 and 4 after them
    alone = [lm.prefill(p)[1] for p in prompts]
    batch = lm._stack(alone)
    tokens = np.array([8, 2, 13])
    got, _ = lm.step(tokens, batch)
    for row, state in enumerate(alone):
        want, _ = lm.step(tokens[row : row + 1], state)
        np.testing.assert_allclose(got[row], want[0], atol=1e-6)


def test_runner_suppresses_the_tokens_generate_suppresses(exported):
    """Suppress the token greedy decoding would pick first: both move to the same next best."""
    m, _, out = exported["adaptive"]
    lm, prompt = onnx_generate.OnnxPointerSentinel(out), [EOS, 5, 6, 7]
    first = lm.generate([prompt], 1)[0][0]
    lm.suppress = [first, UNK]
    got = lm.generate([prompt], 6)[0]
    want = m.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, suppress_tokens=[first, UNK])
    assert got[0] != first and got == want[0, 4:].tolist()[: len(got)]


def test_sampling_runner_follows_its_seed_and_suppresses(exported):
    _, tok, out = exported["sentinel"]
    lm = onnx_generate.OnnxPointerSentinel(out, int8=True)
    a, b, c = (lm.generate([[EOS, 5, 6]], 40, do_sample=True, temperature=1.5, top_k=8, seed=s) for s in (3, 3, 4))
    assert a == b and a != c and UNK not in a[0]


def run_without_torch(out, *args) -> subprocess.CompletedProcess:
    """onnx_generate.main(out, args) in a fresh process where torch cannot be imported."""
    code = f"""
        import sys; sys.modules["torch"] = None
        sys.path.insert(0, {str(ROOT / "examples")!r})
        import onnx_generate
        onnx_generate.main({[str(out), *args]!r})
    """
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)


def test_runner_needs_no_torch(exported):
    done = run_without_torch(exported["sentinel"][2], "--prompt", "a b c", "--max_new_tokens", "5", "--int8")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("a b c")


def test_runner_missing_int8_is_one_error(tmp_path, exported, capsys):
    _, _, out = exported["sentinel"]
    (tmp_path / "decode_step.onnx").write_bytes((out / "decode_step.onnx").read_bytes())
    with pytest.raises(SystemExit) as e:
        onnx_generate.main([str(tmp_path), "--prompt", "a", "--int8"])
    assert e.value.code == 2 and "decode_step.int8.onnx is missing" in capsys.readouterr().err


SHIPPED_WT2 = ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"


@pytest.fixture(scope="module")
def shipped_wt2(tmp_path_factory):
    """The shipped WikiText-2 pointer model exported (fp32 and int8) and scored on the first 4,000 tokens of the
    bundled test split."""
    tmp = tmp_path_factory.mktemp("shipped_wt2")
    text = tmp / "test.txt"
    bundled = ROOT / "modeling_pointer_sentinel" / "data" / "wikitext-2" / "wiki.test.tokens.xz"
    text.write_text(lzma.decompress(bundled.read_bytes()).decode())
    export_onnx.main([str(SHIPPED_WT2), str(tmp / "onnx"), "--int8", "--check_steps", "20", "--test_file", str(text),
                      "--max_tokens", "4000"])  # fmt: skip
    return tmp / "onnx"


def test_int8_keeps_the_shipped_models_perplexity(shipped_wt2):
    """The shipped WikiText-2 model (it has a speller: its words outside the vocabulary are spelled, two graphs) on
    the first 4,000 tokens of the bundled test split: ONNX fp32 equals PyTorch, int8 costs at most 1% (per token and
    in bits per byte) and its files are at most a third of fp32's, which hold each weight once but the speller's
    byte LSTM, output layer and byte embedding, which the byte step's graph holds again."""
    report = json.loads((shipped_wt2 / "export.json").read_text())
    ppl = report["test_perplexity"]
    assert ppl["targets"] >= 3990
    assert abs(ppl["onnx_fp32"] / ppl["pytorch"] - 1) < 1e-5
    assert ppl["onnx_int8"] <= 1.01 * ppl["onnx_fp32"]
    assert ppl["onnx_int8_bits_per_byte"] <= 1.01 * ppl["onnx_fp32_bits_per_byte"]
    assert report["file_bytes"]["onnx_int8"] * 3 <= report["file_bytes"]["onnx_fp32"]
    reference = PointerSentinelForCausalLM.from_pretrained(SHIPPED_WT2)
    again = sum(p.numel() * 4 for n, p in reference.named_parameters() if n.startswith("speller.")
                and not n.startswith("speller.init_state"))  # fmt: skip
    whole = sum(p.numel() * 4 for p in reference.parameters())
    assert again and report["file_bytes"]["onnx_fp32"] < 1.02 * whole + again
