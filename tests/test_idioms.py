"""Every standard transformers idiom writes a word the vocabulary lacks back as the prompt spelled it, with no table
passed: decode / batch_decode of generate's output, beam search, num_return_sequences, TextStreamer,
TextIteratorStreamer, tokenize / convert_ids_to_tokens, pipeline, examples/generate.py and examples/onnx_generate.py.
The tokenizer remembers what it encoded (`EncodedRows`, tokenization_pointer_sentinel.py); the shipped WikiText-2
pointer folder (its copy head: `config.oov_pointer`) writes the name by greedy decoding through the real
`model.generate`."""

import copy
import pickle
import sys
import threading

import pytest
import torch
from conftest import ROOT
from transformers import AutoModelForCausalLM, AutoTokenizer, TextIteratorStreamer, TextStreamer, pipeline

from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary
from modeling_pointer_sentinel.tokenization_pointer_sentinel import EncodedRows

sys.path.insert(0, str(ROOT / "examples"))
import generate as generate_script  # noqa: E402
import onnx_generate  # noqa: E402

COPIER = ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"  # the shipped WikiText-2 pointer folder (copy head)
# prompts on which its greedy continuation starts with the prompt's unseen name (6 words: " Quarrington of the
# Quarrington of the" and " Esselbrook of the Esselbrook, the")
RIVER = "\nThe Quarrington River is a river. The"
PLAYED = "\nSmith and Esselbrook played. Esselbrook and Smith played. Esselbrook and"
BAD = ("<oov-", "<unk>")


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(COPIER, trust_remote_code=True)


@pytest.fixture(scope="module")
def model():
    return AutoModelForCausalLM.from_pretrained(COPIER, trust_remote_code=True, dtype=torch.float32).eval()


def clean(text: str, name: str, prompt: str | None = None) -> None:
    assert not any(b in text for b in BAD), text
    after = text[len(prompt.strip()) :] if prompt is not None else text
    assert name in after, text  # the name, copied, written


def greedy(model, enc, **kw):
    return model.generate(**enc, max_new_tokens=6, do_sample=False, **kw)


def test_decode_of_generate_output(tok, model):
    enc = tok(RIVER, return_tensors="pt")
    out = greedy(model, enc)
    assert tok.word_vocab_size in out[0, enc["input_ids"].shape[1] :].tolist()  # the model copied slot 0
    for skip in (False, True):
        text = tok.decode(out[0], skip_special_tokens=skip)
        clean(text, "Quarrington", RIVER)
        assert text.startswith(RIVER if not skip else RIVER.lstrip("\n"))
    clean(tok.batch_decode(out, skip_special_tokens=True)[0], "Quarrington", RIVER)


def test_batch_decode_of_a_left_padded_batch(tok, model):
    prompts = [RIVER, PLAYED]
    enc = tok(prompts, padding=True, return_tensors="pt")
    assert enc["attention_mask"][0, 0] == 0  # RIVER is left-padded
    out = greedy(model, enc)
    for skip in (False, True):
        texts = tok.batch_decode(out, skip_special_tokens=skip)
        for prompt, name, text in zip(prompts, ["Quarrington", "Esselbrook"], texts, strict=True):
            clean(text, name, prompt)
            assert ("Esselbrook" if name == "Quarrington" else "Quarrington") not in text  # each row its own word
    assert tok.decode(out) == tok.batch_decode(out)


def test_beam_search_and_num_return_sequences(tok, model):
    enc = tok([RIVER, PLAYED], padding=True, return_tensors="pt")
    out = greedy(model, enc, num_beams=3, num_return_sequences=2)
    texts = tok.batch_decode(out, skip_special_tokens=True)
    assert len(texts) == 4
    for text, name in zip(texts, ["Quarrington"] * 2 + ["Esselbrook"] * 2, strict=True):
        assert not any(b in text for b in BAD) and text.count(name) >= 2, text


@pytest.mark.parametrize("skip_prompt", [False, True])
def test_text_streamer(tok, model, capsys, skip_prompt):
    enc = tok(RIVER, return_tensors="pt")
    out = greedy(model, enc, streamer=TextStreamer(tok, skip_prompt=skip_prompt))
    printed = capsys.readouterr().out
    clean(printed, "Quarrington", None if skip_prompt else RIVER)
    new = tok.decode(out[0, enc["input_ids"].shape[1] :], oov_words=enc.oov_words)
    assert printed.rstrip("\n").endswith(new) and printed.startswith(RIVER if not skip_prompt else new[:5])


@pytest.mark.parametrize("skip_prompt", [False, True])
def test_text_iterator_streamer(tok, model, skip_prompt):
    """generate runs in another thread, which decodes: the words are found all the same."""
    enc = tok(RIVER, return_tensors="pt")
    streamer = TextIteratorStreamer(tok, skip_prompt=skip_prompt)
    thread = threading.Thread(target=greedy, args=(model, enc), kwargs={"streamer": streamer})
    thread.start()
    text = "".join(streamer)
    thread.join()
    clean(text, "Quarrington", None if skip_prompt else RIVER)


def test_tokenize_and_convert_ids_to_tokens(tok):
    assert tok.tokenize("Quarrington met Esselbrook") == ["Quarrington", "met", "Esselbrook"]
    ids = tok("Quarrington met Esselbrook and Quarrington")["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["Quarrington", "met", "Esselbrook", "and", "Quarrington"]
    assert tok.convert_ids_to_tokens(ids[0]) == "<oov-0>"  # one id alone names no word
    assert tok.tokenize("the <unk> cat") == ["the", "<unk>", "cat"]  # a literal <unk> stays the corpus's


def test_pipeline(model, tok):
    pipe = pipeline("text-generation", model=str(COPIER), trust_remote_code=True, dtype=torch.float32)
    text = pipe(RIVER, max_new_tokens=6, do_sample=False)[0]["generated_text"]
    clean(text, "Quarrington", RIVER)


def test_generate_script(capsys):
    generate_script.main([str(COPIER), "--prompt", RIVER, "--max_new_tokens", "6"])
    clean(capsys.readouterr().out, "Quarrington", RIVER)


@pytest.fixture(scope="module")
def onnx_copier(tmp_path_factory):
    """The copying model of test_onnx_text (its pointer dominates, so greedy copies), exported."""
    from test_onnx_text import export_onnx, open_tiny

    src, out = tmp_path_factory.mktemp("copier"), tmp_path_factory.mktemp("copier_onnx")
    open_tiny(src)
    export_onnx.main([str(src), str(out), "--check_steps", "5"])
    return out


def test_onnx_generate_script(onnx_copier, capsys):
    """The runner writes the copied word, and loading the folder warns of no model-type mismatch (its config's code
    ships beside config.json)."""
    assert (onnx_copier / "configuration_pointer_sentinel.py").is_file()
    capsys.readouterr()
    onnx_generate.main([str(onnx_copier), "--prompt", "Zork a Zork b Zork", "--max_new_tokens", "4"])
    out = capsys.readouterr()
    clean(out.out, "Zork", "Zork a Zork b Zork")
    assert "You are using a model of type" not in out.err + out.out


# ---- the registry: threads, bound, explicit tables, copies ----


def test_two_threads_see_their_own_words(tok, model):
    """Two threads encode prompts whose ids are equal (they differ only in the unseen name) before either decodes:
    each decodes its own name (a thread's own encodings come first)."""
    barrier, got = threading.Barrier(2), {}

    def run(name):
        enc = tok(RIVER.replace("Quarrington", name), return_tensors="pt")
        barrier.wait()  # both prompts encoded
        out = greedy(model, enc)
        barrier.wait()
        got[name] = (tok.decode(out[0]), enc["input_ids"].tolist())

    threads = [threading.Thread(target=run, args=(n,)) for n in ("Quarrington", "Esselbrook")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert got["Quarrington"][1] == got["Esselbrook"][1]  # the ids alone cannot tell them apart
    for name, other in (("Quarrington", "Esselbrook"), ("Esselbrook", "Quarrington")):
        clean(got[name][0], name, RIVER)
        assert other not in got[name][0]


def test_oov_words_wins_and_unexplained_placeholders_read_as_today(tok):
    enc = tok("Quarrington met Esselbrook")
    assert tok.decode(enc["input_ids"]) == "Quarrington met Esselbrook"
    assert tok.decode(enc["input_ids"], oov_words=["A", "B"]) == "A met B"
    assert tok.decode(enc["input_ids"], oov_words=[]) == "<oov-0> met <oov-1>"
    V = tok.word_vocab_size
    assert tok.decode([V + 7, V + 8]).count("<oov-") == 2  # slots the newest encoding has no word for


def test_the_registry_is_bounded_and_a_copy_starts_empty():
    tok = open_vocabulary(build_word_level_tokenizer(["a b c <unk>"]), oov_slots=4)
    tok.encoded_rows = EncodedRows(max_rows=2, max_ids=100)
    V = tok.word_vocab_size
    tok("x a")
    tok("a b y")
    assert tok.decode([V, tok.convert_tokens_to_ids("a"), V]) == "x a x"
    tok("b b z")  # full: the oldest row ("x a") goes
    assert len(tok.encoded_rows) == 2
    assert tok.decode([V, tok.convert_tokens_to_ids("a"), V]) == "z a z"  # the fallback: the newest encoding
    assert tok.decode(tok("a b y")["input_ids"] + [V]) == "a b y y"
    for other in (copy.deepcopy(tok), pickle.loads(pickle.dumps(tok))):
        assert len(other.encoded_rows) == 0 and other.decode([V]) == "<oov-0>"


def test_empty_text_is_a_well_formed_encoding(tok):
    for text in ("", "   "):
        enc = tok(text)
        assert enc["input_ids"] == [] and enc["attention_mask"] == [] and enc.oov_words == [[]]
        pt = tok(text, return_tensors="pt")
        assert pt["input_ids"].shape == pt["attention_mask"].shape == (1, 0)
    enc = tok(["", "the"], padding=True)
    assert len(enc["input_ids"][0]) == len(enc["attention_mask"][0]) == 1


@pytest.mark.parametrize("script", ["generate", "onnx_generate"])
def test_a_blank_prompt_is_one_error_line(script, onnx_copier, capsys):
    main, folder = (generate_script.main, COPIER) if script == "generate" else (onnx_generate.main, onnx_copier)
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main([str(folder), "--prompt", "   "])
    err = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and len(err) == 1 and "--prompt has no words to continue" in err[0], err
