"""Baselines that spell everything (examples/baselines.py, modeling_pointer_sentinel/baselines.py): the byte and BPE
tokenizers give back the text, the bits per byte are right whatever the tokenization, and a run resumes exactly."""

import json
import lzma
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file
from transformers.convert_slow_tokenizer import bytes_to_unicode

from modeling_pointer_sentinel import PointerSentinelConfig, PointerSentinelForCausalLM
from modeling_pointer_sentinel.baselines import (
    bpe_tokenizer,
    byte_tokenizer,
    corpus_text,
    corpus_words,
    encode_corpus,
    frequency_figures,
    token_nats,
    word_bytes,
    word_nats_of_tokens,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "baselines.py"
WT2 = ROOT / "modeling_pointer_sentinel" / "data" / "wikitext-2"

# words as a corpus holds them: any characters but white space (accents, emoji and other scripts included)
WORD = st.text(st.characters(blacklist_categories=("Z", "C")), min_size=1, max_size=12)
LINES = st.lists(st.lists(WORD, max_size=8).map(" ".join), min_size=1, max_size=6)


def wt2_lines(n: int, start: int = 0) -> list[str]:
    return lzma.open(WT2 / "wiki.valid.tokens.xz", "rt", encoding="utf-8").read().splitlines()[start : start + n]


@pytest.fixture(scope="module")
def bpe():
    return bpe_tokenizer(wt2_lines(200), 400)


@settings(max_examples=60, deadline=None)
@given(LINES)
def test_byte_tokenizer_round_trip(lines):
    tok = byte_tokenizer()
    text = corpus_text(lines)
    ids = tok(text).input_ids
    assert tok.decode(ids) == text
    # one id per byte, the byte's value, the line break the eos token
    assert ids == [tok.eos_token_id if b == 10 else b for b in text.encode()]
    ids_by_line, owners = encode_corpus(tok, lines)  # train.py's stream (line by line) is the same
    assert ids_by_line.tolist() == ids and len(owners) == len(ids)


@settings(max_examples=60, deadline=None)
@given(LINES)
def test_bpe_tokenizer_round_trip(bpe, lines):
    text = corpus_text(lines)
    ids = bpe(text).input_ids
    assert bpe.decode(ids) == text
    assert encode_corpus(bpe, lines)[0].tolist() == ids


def test_tokenizers_write_lines_as_the_word_corpus_does(bpe):
    """WikiText's raw lines (spaces at both ends, blank lines of one space) read as their words joined by one space."""
    raw = " = Robert <unk> = \n \n Robert  <unk> is an English actor . \n"
    for tok in (byte_tokenizer(), bpe):
        assert tok.decode(tok(raw).input_ids) == "= Robert <unk> =\n\nRobert <unk> is an English actor .\n"
    assert len(byte_tokenizer()) == 257 and bpe.convert_ids_to_tokens(bpe("é").input_ids) == ["Ã", "©"]


def plain_model(vocab_size: int, size: int = 8, seed: int = 0) -> PointerSentinelForCausalLM:
    torch.manual_seed(seed)
    config = PointerSentinelConfig(vocab_size=vocab_size, embedding_size=size, hidden_size=size, num_layers=2,
                                   use_pointer=False, tie_word_embeddings=False)  # fmt: skip
    return PointerSentinelForCausalLM(config).eval()


def figures(model, tok, lines, chunk=7):
    ids, owners = encode_corpus(tok, lines)
    words = corpus_words(lines)
    nats = word_nats_of_tokens(token_nats(model, ids, chunk, progress=False), owners, len(words))
    return frequency_figures(nats, word_bytes(words), torch.zeros(len(words), dtype=torch.long)), nats


def test_uniform_byte_model_scores_exactly_8_bits_per_byte():
    """Every byte 1/256 (the line break's byte 10 is never an id: the eos token writes it): 8 bits per byte, over
    exactly the word models' bytes (the first word is context; no blank line here)."""
    lines = [line for line in wt2_lines(5) if line.strip()]  # no blank line
    tok = byte_tokenizer()
    model = plain_model(len(tok))
    with torch.no_grad():
        model.lm_head.weight.zero_()
        model.lm_head.bias.zero_()
        model.lm_head.bias[10] = -math.inf
    result, _ = figures(model, tok, lines)
    words = corpus_words(lines)
    assert result["bytes"] == int(word_bytes(words)[1:].sum()) == len(corpus_text(lines).encode()) - len(words[0]) - 1
    assert result["bits_per_byte"] == pytest.approx(8.0, abs=1e-9)


def slow_word_bits(model, tok, lines) -> list[float]:
    """Each word's bits, one forward of the whole prefix per token, each token's bits given to the word whose text
    holds the token's last byte (found by walking the text)."""
    ids = tok(corpus_text(lines)).input_ids
    text = corpus_text(lines).encode()
    # each byte's word: the words and their separators in order, a blank line's break its <eos>'s
    word_of_byte, w = [], 0
    for line in lines:
        for word in line.split():
            word_of_byte += [w] * (len(word.encode()) + 1)
            w += 1
        word_of_byte += [w] * (not line.split())
        w += 1
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    spelled = [b"\n" if i == tok.eos_token_id else bytes(byte_of[c] for c in t)
               for i, t in zip(ids, tok.convert_ids_to_tokens(ids), strict=True)]  # fmt: skip
    assert b"".join(spelled) == text
    bits, at = [0.0] * w, len(spelled[0])
    with torch.no_grad():
        for t in range(1, len(ids)):
            log_p = torch.log_softmax(model(torch.tensor([ids[:t]])).logits[0, -1].double(), -1)[ids[t]]
            at += len(spelled[t])
            bits[word_of_byte[at - 1]] -= log_p.item() / math.log(2)
    assert at == len(text)
    return bits


@pytest.mark.parametrize("kind", ["byte", "bpe"])
def test_bits_per_byte_is_minus_log2_p_over_bytes_by_a_slow_loop(kind, bpe, trained_run):
    """The scored figure (chunks, state carried) against a token-by-token loop over whole prefixes: the total and
    each word's bits, for a trained tiny byte baseline and a BPE model; a blank line included."""
    title, blank, text = wt2_lines(3, start=1)
    lines = [title, blank, " ".join(text.split()[:25]), "Zürich 's 😀 ."]
    if kind == "byte":
        sys.path.insert(0, str(SCRIPT.parent))
        from baselines import load_run

        model, tok, weights = load_run(trained_run)
        assert weights == "run/step_4"
    else:
        model, tok = plain_model(len(bpe), seed=1), bpe
    result, nats = figures(model, tok, lines)
    slow = slow_word_bits(model, tok, lines)
    words = corpus_words(lines)
    assert math.isnan(nats[0]) and nats[1:].div(math.log(2)).tolist() == pytest.approx(slow[1:], rel=1e-6, abs=1e-9)
    expected = sum(slow[1:]) / int(word_bytes(words)[1:].sum())
    assert result["bits_per_byte"] == pytest.approx(expected, rel=1e-9)


def launch(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})  # fmt: skip


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("baseline_data")
    lines = wt2_lines(90, start=1)
    for name, part in (("train", lines[:60]), ("valid", lines[60:75]), ("test", lines[75:])):
        (d / f"{name}.txt").write_text("\n".join(part) + "\n")
    return d


def train_args(data: Path, out: Path, steps: int) -> list:
    return ["train", "byte", "--output_dir", out, "--size", "8", "--checkpointing_steps", "2", "--bptt", "20",
            "--train_file", data / "train.txt", "--validation_file", data / "valid.txt", "--test_file",
            data / "test.txt", "--", "--max_train_steps", steps, "--per_device_train_batch_size", "2",
            "--checkpoints_total_limit", "2", "--log_every", "1", "--data_cache_dir", data / "cache"]  # fmt: skip


@pytest.fixture(scope="module")
def trained_run(tiny_data, tmp_path_factory):
    """A tiny byte baseline trained 4 updates (checkpoints at 2 and 4); its final model removed, so that the run reads
    as one still going (scored from its newest checkpoint)."""
    out = tmp_path_factory.mktemp("runs") / "byte"
    done = launch(*train_args(tiny_data, out, 4))
    assert done.returncode == 0, done.stderr[-3000:]
    keep = out.parent / "finished"
    shutil.copytree(out, keep)
    (out / "run" / "model.safetensors").unlink()
    return out


def test_resume_of_a_baseline_run_is_exact(trained_run, tiny_data, tmp_path):
    """The run's folder cut back to its step-2 checkpoint, then the same command: it resumes there and ends on the
    very weights and optimizer state of the run that went on uninterrupted."""
    whole = trained_run.parent / "finished"
    cut = tmp_path / "byte"
    shutil.copytree(whole, cut)
    shutil.rmtree(cut / "run" / "step_4")
    (cut / "run" / "model.safetensors").unlink()
    done = launch(*train_args(tiny_data, cut, 4))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from" in done.stdout and "step_2" in done.stdout
    x, y = (load_file(d / "run" / "step_4" / "model.safetensors") for d in (whole, cut))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    a, b = (torch.load(d / "run" / "step_4" / "optimizer.bin", weights_only=True)["state"] for d in (whole, cut))
    assert a.keys() == b.keys() and all(torch.equal(a[i][k], b[i][k]) for i in a for k in a[i])
    losses = [[r["train_loss"] for r in map(json.loads, (d / "run" / "log.jsonl").read_text().splitlines())
               if "train_loss" in r and r["step"] > 2] for d in (whole, cut)]  # fmt: skip
    assert losses[0] == losses[1][-len(losses[0]) :] and losses[0]


def test_bad_input_is_one_line(tmp_path):
    done = launch("score", tmp_path / "nothing")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "is not a baseline run (no config.json)" in done.stderr.strip().splitlines()[-1]
    done = launch("train", "bpe", "--output_dir", tmp_path, "--vocab_size", "100")
    assert done.returncode == 2 and "--vocab_size" in done.stderr and "Traceback" not in done.stderr


def test_score_command_reports_the_library_figure_split_by_training_count(trained_run, tiny_data, tmp_path):
    """`baselines.py score` of a run still going (its newest checkpoint): the figure of the functions tested above,
    the words split by their count in the training file, `<unk>` on its own line."""
    sys.path.insert(0, str(SCRIPT.parent))
    from baselines import load_run

    out = tmp_path / "score.json"
    files = ["--train_file", tiny_data / "train.txt", "--validation_file", tiny_data / "valid.txt"]
    done = launch("score", trained_run, *files, "--output_json", out)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["weights"] == "run/step_4"
    lines = (tiny_data / "valid.txt").read_text().splitlines()
    model, tok, _ = load_run(trained_run)
    expected, _ = figures(model, tok, lines)
    got = result["validation"]
    assert got["bits_per_byte"] == pytest.approx(expected["bits_per_byte"], rel=1e-9)
    assert (got["words"], got["bytes"]) == (expected["words"], expected["bytes"])
    seen = corpus_words((tiny_data / "train.txt").read_text().splitlines())
    words = corpus_words(lines)[1:]
    rare = [w for w in words if 1 <= seen.count(w) <= 100]
    assert got["train_count_0-0"]["words"] == sum(w not in seen for w in words) > 0
    assert got["train_count_1-100"]["words"] == len(rare) > 0
    assert got["unk"]["words"] == words.count("<unk>") > 0
