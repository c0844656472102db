"""examples/onnx_generate.py reads prompts with the exported folder's open-vocabulary tokenizer and writes the text
pipeline("text-generation") writes: each prompt's out-of-vocabulary words become placeholders the graph copies, and
come back written from the prompt's own table; nothing is put before the prompt; the same greedy text as the pipeline,
on a tiny copying model and on the shipped WikiText-2 model."""

import sys

import pytest
import torch
from conftest import ROOT, tiny_model
from test_onnx import EOS, UNK, WORDS, N, run_without_torch
from transformers import pipeline

from modeling_pointer_sentinel.pipeline_pointer_sentinel import PointerSentinelTextGenerationPipeline
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary

sys.path.insert(0, str(ROOT / "examples"))
import export_onnx  # noqa: E402
import onnx_generate  # noqa: E402

SHIPPED_WT2 = ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"
NEWS = "Zelenskyy met Macron in Kyiv on Monday. Later that day, Zelenskyy told reporters that"


def open_tiny(folder):
    """A tiny model with N placeholders and the open-vocabulary tokenizer, saved as the shipped folders are (<unk>
    suppressed, no end token). The pointer made to dominate (q = tanh(b_q) for every input, a zero sentinel), so greedy
    decoding copies the window's most frequent word."""
    tok = open_vocabulary(build_word_level_tokenizer([" ".join(WORDS)], text_rules="wikitext"), oov_slots=N)
    m = tiny_model(pointer_window=6, eos_token_id=EOS, pad_token_id=EOS, oov_slots=N, unk_token_id=UNK).eval()
    with torch.no_grad():
        m.pointer.sentinel.fill_(0.0)
        m.pointer.query.weight.zero_()
    m.generation_config.suppress_tokens, m.generation_config.eos_token_id = [UNK], None
    m.save_pretrained(folder)
    tok.save_pretrained(folder)
    return m, tok


@pytest.fixture(scope="module")
def open_exported(tmp_path_factory):
    src, out = tmp_path_factory.mktemp("open_tiny_model"), tmp_path_factory.mktemp("open_tiny_onnx")
    m, tok = open_tiny(src)
    export_onnx.main([str(src), str(out), "--int8", "--check_steps", "50"])
    return m, tok, out


def test_runner_writes_the_words_it_copies(open_exported):
    """Prompts with words the vocabulary lacks: each row copies its own (read by the folder's tokenizer as
    placeholders) and writes them back from its own table; no <unk> and no placeholder token is written. In a process
    without torch too."""
    _, _, out = open_exported
    lm = onnx_generate.OnnxPointerSentinel(out)
    prompts = ["Zork a Zork b Zork", "c Quux d Quux e Quux"]
    encoded = [lm.encode(p) for p in prompts]
    assert [table for _, table in encoded] == [["Zork"], ["Quux"]] and encoded[0][0][0] == 23 == encoded[1][0][1]
    for prompt, (ids, table), new in zip(prompts, encoded, lm.generate([ids for ids, _ in encoded], 6), strict=True):
        assert 23 in new  # the row's placeholder, copied
        text = lm.text(prompt, ids, new, table)
        assert text.startswith(prompt + " ") and table[0] in text[len(prompt) :]
        assert "<unk>" not in text and "<oov" not in text and {"Zork", "Quux"} - {table[0]} & set(text.split()) == set()
    done = run_without_torch(out, "--prompt", prompts[0], "--max_new_tokens", "6", "--int8")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(prompts[0] + " ") and "Zork" in done.stdout[len(prompts[0]) :]


@pytest.mark.parametrize("prompt", ["Zork a Zork b Zork", "a , b , c"])
def test_runner_text_equals_pipeline_text(open_exported, prompt, capsys):
    """The same prompt gives the same greedy text through the runner's command line and pipeline("text-generation"):
    nothing put before the prompt, the copied words written, the new text joined as the pipeline joins it."""
    m, tok, out = open_exported
    generator = pipeline(
        "text-generation", model=m, tokenizer=tok, pipeline_class=PointerSentinelTextGenerationPipeline
    )
    want = generator(prompt, max_new_tokens=8, do_sample=False)[0]["generated_text"]
    onnx_generate.main([str(out), "--prompt", prompt, "--max_new_tokens", "8"])
    assert capsys.readouterr().out == want + "\n"


@pytest.fixture(scope="module")
def shipped_wt2(tmp_path_factory):
    out = tmp_path_factory.mktemp("shipped_wt2_onnx")
    export_onnx.main([str(SHIPPED_WT2), str(out), "--check_steps", "20"])
    return out


@pytest.mark.parametrize("prompt", ["The game was released in Japan in 2011.", NEWS])
def test_runner_text_equals_the_shipped_pipelines_text(shipped_wt2, prompt, capsys):
    """The shipped folder through pipeline("text-generation", model=folder, trust_remote_code=True) and its export
    through the runner give the same greedy text: a whole-sentence prompt continues (nothing put before the prompt,
    no end at the line break), and a prompt's unseen names are spelled (the shipped folder has a speller: two graphs)
    and written back."""
    generator = pipeline("text-generation", model=str(SHIPPED_WT2), trust_remote_code=True, dtype=torch.float32)
    want = generator(prompt, max_new_tokens=12, do_sample=False)[0]["generated_text"]
    onnx_generate.main([str(shipped_wt2), "--prompt", prompt, "--max_new_tokens", "12"])
    got = capsys.readouterr().out
    assert got == want + "\n" and got[len(prompt) :].strip() and "<unk>" not in got


def test_runner_reads_placeholders_beyond_the_graphs_columns_as_unk(tmp_path):
    """A tokenizer with more placeholders than the exported model has columns: the words beyond them read as <unk>
    (as the pipeline reads them), so the graph never meets an id it has no column for."""
    tok = open_vocabulary(build_word_level_tokenizer([" ".join(WORDS)], text_rules="wikitext"), oov_slots=N)
    m = tiny_model(pointer_window=6, eos_token_id=EOS, oov_slots=2, unk_token_id=UNK).eval()
    m.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    export_onnx.main([str(tmp_path / "model"), str(tmp_path / "onnx"), "--check_steps", "5"])
    lm = onnx_generate.OnnxPointerSentinel(tmp_path / "onnx")
    ids, table = lm.encode("Zork Quux Blip a Blip")
    assert ids == [23, 24, UNK, 0, UNK] and table == ["Zork", "Quux", "Blip"]
    assert len(lm.generate([ids], 4)[0]) == 4
