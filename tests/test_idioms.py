"""Every standard transformers idiom writes a word the vocabulary lacks as the text spelled it, with no table and no
memory: the ids carry the text (the shipped WikiText-2 pointer folder spells an unseen word in UTF-8 bytes, and its
pointer copies the spelled word). decode / batch_decode of generate's output, template prompts encoded first, ids
decoded in a new process, a slice decoded by a fresh tokenizer, beam search, num_return_sequences, TextStreamer and
TextIteratorStreamer while another thread encodes, tokenize / convert_ids_to_tokens, pipeline, examples/generate.py
and examples/onnx_generate.py, all through the real `model.generate`. The placeholder tokenizer of a run trained
without a speller keeps its registry (last tests)."""

import copy
import json
import pickle
import subprocess
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

COPIER = ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"  # the shipped WikiText-2 pointer folder (speller)
# prompts on which its greedy continuation starts with the prompt's unseen name, spelled byte by byte (" Quarrington
# of the Quarrington of the" and " Esselbrook of the Esselbrook, the")
RIVER = "\nThe Quarrington River is a river. The"
PLAYED = "\nSmith and Esselbrook played. Esselbrook and Smith played. Esselbrook and"
NAMES = ("Quarrington", "Wenlockstead", "Ambrecote")  # RIVER's template, one name each
BAD = ("<oov-", "<unk>", "<0x", "</w>")
N = 20  # new tokens: a name's bytes and the words after it


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
    return model.generate(**enc, max_new_tokens=N, do_sample=False, **kw)


def fresh():
    return AutoTokenizer.from_pretrained(COPIER, trust_remote_code=True)


def test_decode_of_generate_output(tok, model):
    enc = tok(RIVER, return_tensors="pt")
    out = greedy(model, enc)
    n = enc["input_ids"].shape[1]
    assert out[0, n : n + 12].tolist() == tok(" Quarrington").input_ids  # 11 bytes and </w>: copied, spelled
    for skip in (False, True):
        text = tok.decode(out[0], skip_special_tokens=skip)
        clean(text, "Quarrington", RIVER)
        assert text.startswith(RIVER if not skip else RIVER.lstrip("\n"))
    clean(tok.batch_decode(out, skip_special_tokens=True)[0], "Quarrington", RIVER)


def test_template_prompts_encoded_first_each_decode_their_own_name(tok, model):
    """The batch-job pattern: every prompt encoded, then each generated and decoded, the slice after the prompt by
    a tokenizer that never saw it."""
    encodings = [tok(RIVER.replace("Quarrington", name), return_tensors="pt") for name in NAMES]
    assert len({e["input_ids"].shape[1] for e in encodings}) == 3  # the names are in the ids, not a slot
    for name, enc in zip(NAMES, encodings, strict=True):
        out = greedy(model, enc)
        new = fresh().decode(out[0, enc["input_ids"].shape[1] :])
        clean(new, name)
        assert all(other not in new for other in NAMES if other != name), new


def test_ids_decode_in_a_new_process(tok, model, tmp_path):
    enc = tok(RIVER, return_tensors="pt")
    out = greedy(model, enc)
    (tmp_path / "ids.json").write_text(json.dumps(out[0].tolist()))
    code = ("import json, sys; from transformers import AutoTokenizer; "
            "tok = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True); "
            "print(json.dumps(tok.decode(json.load(open(sys.argv[2])))))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, str(COPIER), str(tmp_path / "ids.json")], capture_output=True,
                          text=True, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    text = json.loads(done.stdout.strip().splitlines()[-1])
    assert text == tok.decode(out[0])
    clean(text, "Quarrington", RIVER)


def test_batch_decode_of_a_left_padded_batch(tok, model):
    prompts = [RIVER, PLAYED]
    enc = tok(prompts, padding=True, return_tensors="pt")
    assert enc["attention_mask"][0, 0] == 0  # RIVER is left-padded
    out = greedy(model, enc)
    texts = tok.batch_decode(out, skip_special_tokens=True)
    for prompt, name, text in zip(prompts, ["Quarrington", "Esselbrook"], texts, strict=True):
        clean(text, name, prompt)
        assert text.startswith(prompt.lstrip("\n"))  # padding never shows as text
        assert ("Esselbrook" if name == "Quarrington" else "Quarrington") not in text  # each row its own word


def test_beam_search_and_num_return_sequences(tok, model):
    enc = tok([RIVER, PLAYED], padding=True, return_tensors="pt")
    out = greedy(model, enc, num_beams=3, num_return_sequences=2)
    texts = tok.batch_decode(out, skip_special_tokens=True)
    assert len(texts) == 4
    for text, name in zip(texts, ["Quarrington"] * 2 + ["Esselbrook"] * 2, strict=True):
        assert not any(b in text for b in BAD) and text.count(name) >= 2, text


def other_user(tok, started: threading.Event, stop: threading.Event):
    """Another user's prompt, encoded and decoded over and over while the first user streams."""
    started.set()
    while not stop.is_set():
        tok.decode(tok(PLAYED.replace("Esselbrook", "Trevanion"))["input_ids"])


def streaming(tok, run):
    """run() while another thread encodes another user's prompt."""
    started, stop = threading.Event(), threading.Event()
    other = threading.Thread(target=other_user, args=(tok, started, stop))
    other.start()
    started.wait()
    try:
        return run()
    finally:
        stop.set()
        other.join()


@pytest.mark.parametrize("skip_prompt", [False, True])
def test_text_streamer_while_another_thread_encodes(tok, model, capsys, skip_prompt):
    enc = tok(RIVER, return_tensors="pt")
    out = streaming(tok, lambda: greedy(model, enc, streamer=TextStreamer(tok, skip_prompt=skip_prompt)))
    printed = capsys.readouterr().out
    clean(printed, "Quarrington", None if skip_prompt else RIVER)
    assert "Trevanion" not in printed
    new = tok.decode(out[0, enc["input_ids"].shape[1] :])
    assert printed.rstrip("\n").endswith(new.rstrip("\n"))
    assert printed.startswith(RIVER if not skip_prompt else new[:5])


@pytest.mark.parametrize("skip_prompt", [False, True])
def test_text_iterator_streamer_while_another_thread_encodes(tok, model, skip_prompt):
    """generate runs in a thread of its own, which decodes, while another encodes another user's prompt."""
    enc = tok(RIVER, return_tensors="pt")
    streamer = TextIteratorStreamer(tok, skip_prompt=skip_prompt)

    def run():
        thread = threading.Thread(target=greedy, args=(model, enc), kwargs={"streamer": streamer})
        thread.start()
        text = "".join(streamer)
        thread.join()
        return text

    text = streaming(tok, run)
    clean(text, "Quarrington", None if skip_prompt else RIVER)
    assert "Trevanion" not in text


def test_tokenize_and_convert_ids_to_tokens(tok):
    spelled = [f"<0x{b:02X}>" for b in b"Quarrington"] + ["</w>"]
    assert tok.tokenize("Quarrington met") == [*spelled, "met"]
    ids = tok("Quarrington met Quarrington")["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == [*spelled, "met", *spelled]
    assert tok.convert_ids_to_tokens(ids[0]) == "<0x51>"  # one id alone is one byte: "Q"
    assert tok.tokenize("the <unk> cat") == ["the", "<unk>", "cat"]  # a literal <unk> stays the corpus's


def test_pipeline(model, tok):
    pipe = pipeline("text-generation", model=str(COPIER), trust_remote_code=True, dtype=torch.float32)
    text = pipe(RIVER, max_new_tokens=N, do_sample=False)[0]["generated_text"]
    clean(text, "Quarrington", RIVER)
    new = pipe(RIVER, max_new_tokens=N, do_sample=False, return_full_text=False)[0]["generated_text"]
    clean(new, "Quarrington")


def test_generate_script(capsys):
    generate_script.main([str(COPIER), "--prompt", RIVER, "--max_new_tokens", str(N)])
    clean(capsys.readouterr().out, "Quarrington", RIVER)


def test_add_tokens_then_resize_token_embeddings(tok, model):
    """The added token is a word of the model, its id after the spelling: text without it generates as before, and
    a prompt that holds it and an unseen name decodes back as written, its continuation copying the name."""
    other = fresh()
    other.add_tokens(["<speaker>"])
    resized = copy.deepcopy(model)
    resized.resize_token_embeddings(len(other))
    enc = tok(RIVER, return_tensors="pt")
    assert greedy(resized, enc).tolist() == greedy(model, enc).tolist()
    prompt = RIVER.replace("river. The", "river. <speaker> The")
    enc = other(prompt, return_tensors="pt")
    assert enc["input_ids"][0].tolist().count(len(other) - 1) == 1
    text = other.decode(greedy(resized, enc)[0])
    assert text.startswith(prompt)
    clean(text, "Quarrington", prompt)


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


# ---- a placeholder tokenizer's registry (no speller): bound, explicit tables, copies ----


def test_oov_words_wins_and_unexplained_placeholders_read_as_today():
    tok = open_vocabulary(build_word_level_tokenizer(["a b met c <unk>"]), oov_slots=4)
    enc = tok("Quarrington met Esselbrook")
    assert tok.decode(enc["input_ids"]) == "Quarrington met Esselbrook"
    assert tok.decode(enc["input_ids"], oov_words=["A", "B"]) == "A met B"
    assert tok.decode(enc["input_ids"], oov_words=[]) == "<oov-0> met <oov-1>"
    V = tok.word_vocab_size
    assert tok.decode([V + 2, V + 3]).count("<oov-") == 2  # slots the newest encoding has no word for


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
        assert enc["input_ids"] == [] and enc["attention_mask"] == [] and tok.decode(enc["input_ids"]) == ""
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
