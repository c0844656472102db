import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import tiny_model
from transformers import pipeline

from modeling_pointer_sentinel import PointerSentinelConfig, PointerSentinelForCausalLM
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

PROMPT = torch.tensor([[1, 2, 3, 1, 2, 4, 1]])
ADAPTIVE = dict(adaptive_softmax_cutoffs=[4, 10], adaptive_softmax_div_value=2.0)  # V = 23: two tail clusters
SOFTMAXES = pytest.mark.parametrize("softmax", [{}, ADAPTIVE], ids=["full", "adaptive"])


def model(**kw):
    return tiny_model(pointer_window=6, **kw).eval()


def gen(m, x=PROMPT, **kw):
    kw.setdefault("max_new_tokens", 6)
    kw.setdefault("pad_token_id", 0)
    return m.generate(x, **kw)


@SOFTMAXES
def test_first_step_scores_equal_forward_mixture(softmax):
    m = model(**softmax)
    out = gen(m, do_sample=False, output_scores=True, return_dict_in_generate=True)
    fwd = m(PROMPT)
    torch.testing.assert_close(out.scores[0], fwd.logits[:, -1], atol=1e-5, rtol=1e-5)
    off = gen(m, do_sample=False, output_scores=True, return_dict_in_generate=True, pointer_mix=False)
    want = torch.log_softmax(fwd.vocab_logits[:, -1], -1)
    torch.testing.assert_close(torch.log_softmax(off.scores[0], -1), want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out.scores[0], off.scores[0])


@SOFTMAXES
def test_every_step_scores_equal_forward_on_the_generated_sequence(softmax):
    m = model(**softmax)
    out = gen(m, do_sample=False, output_scores=True, return_dict_in_generate=True)
    fwd = m(out.sequences[:, :-1]).logits[:, PROMPT.shape[1] - 1 :]
    torch.testing.assert_close(torch.stack(out.scores, 1), fwd, atol=1e-5, rtol=1e-5)


def test_pointer_changes_greedy_choice_towards_window_words():
    m = model()
    with torch.no_grad():
        m.pointer.sentinel.fill_(0.0)
        m.pointer.query.weight.zero_()  # q = 0: uniform attention, g = 1/(n+1): most mass on the window
    out = gen(m, do_sample=False)
    assert set(out[0, PROMPT.shape[1] :].tolist()) <= set(PROMPT[0].tolist())


@pytest.mark.parametrize("decode_step", ["forward", "fast"])
def test_decoding_is_one_token_per_step_after_prefill(decode_step):
    """The forward path calls forward once per token; the fast path once, for the prompt, then the decode step."""
    m = model()
    lengths = []
    m.register_forward_pre_hook(
        lambda mod, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    out = gen(m, max_new_tokens=8, do_sample=False, decode_step=decode_step)
    assert out.shape[1] == PROMPT.shape[1] + 8
    assert lengths == [PROMPT.shape[1]] + [1] * 7 * (decode_step == "forward")


@pytest.mark.parametrize(
    "kw",
    [
        dict(do_sample=False),
        dict(do_sample=True, top_k=5, temperature=0.7),
        dict(do_sample=True, top_p=0.8),
        dict(num_beams=3, num_return_sequences=2, do_sample=False),
        dict(do_sample=False, repetition_penalty=1.5),
    ],
)
def test_cache_and_no_cache_give_same_tokens(kw):
    m = model()
    torch.manual_seed(0)
    a = gen(m, use_cache=True, **kw)
    torch.manual_seed(0)
    b = gen(m, use_cache=False, **kw)
    assert torch.equal(a, b)


def test_repetition_penalty_acts_on_the_mixture():
    m = model()
    plain = gen(m, do_sample=False, output_scores=True, return_dict_in_generate=True)
    pen = gen(m, do_sample=False, output_scores=True, return_dict_in_generate=True, repetition_penalty=2.0)
    mixed = m(PROMPT).logits[:, -1]
    seen = PROMPT[0].unique()
    want = mixed.clone()
    want[0, seen] = torch.where(mixed[0, seen] < 0, mixed[0, seen] * 2.0, mixed[0, seen] / 2.0)
    torch.testing.assert_close(pen.scores[0], want, atol=1e-5, rtol=1e-5)
    assert not torch.equal(plain.scores[0], pen.scores[0])


def test_continuing_from_returned_cache_equals_uninterrupted():
    m = model()
    full = gen(m, max_new_tokens=8, do_sample=False)
    first = gen(m, max_new_tokens=3, do_sample=False, return_dict_in_generate=True)
    rest = gen(m, first.sequences, max_new_tokens=5, do_sample=False, past_key_values=first.past_key_values)
    assert torch.equal(rest, full)


@pytest.mark.parametrize("kw", [dict(do_sample=False), dict(num_beams=2, do_sample=False)])
def test_left_padded_batch_equals_rows_alone(kw):
    m = model()
    a, b = [1, 2, 3, 1, 2, 4, 1], [5, 3, 5]
    batch = torch.tensor([a, [0] * 4 + b])
    mask = torch.tensor([[1] * 7, [0] * 4 + [1] * 3])
    out = gen(m, batch, attention_mask=mask, max_new_tokens=9, **kw)
    assert torch.equal(out[0, 7:], gen(m, torch.tensor([a]), max_new_tokens=9, **kw)[0, 7:])
    assert torch.equal(out[1, 7:], gen(m, torch.tensor([b]), max_new_tokens=9, **kw)[0, 3:])


def test_eos_stops_generation():
    m = model()
    free = gen(m, max_new_tokens=10, do_sample=False)
    second = int(free[0, PROMPT.shape[1] + 1])
    stop = gen(m, max_new_tokens=10, do_sample=False, eos_token_id=second)
    assert second != free[0, PROMPT.shape[1]]
    assert torch.equal(stop[0], free[0, : PROMPT.shape[1] + 2])


def test_unsupported_decoding_modes_raise_clearly():
    m = model()
    with pytest.raises(ValueError, match="stateful"):
        gen(m, prompt_lookup_num_tokens=2)
    with pytest.raises(ValueError, match="Contrastive search is not supported"):
        gen(m, penalty_alpha=0.6, top_k=4)


@SOFTMAXES
def test_plain_lstm_generates_without_processor(softmax):
    m = model(use_pointer=False, **softmax)
    out = gen(m, do_sample=False, output_scores=True, return_dict_in_generate=True)
    torch.testing.assert_close(out.scores[0], m(PROMPT).logits[:, -1])


CORPUS = ["the cat sat on the mat", "the dog sat on the log", "a cat saw a dog"]


def small_lm_and_tokenizer():
    tok = build_word_level_tokenizer(CORPUS)
    torch.manual_seed(0)
    cfg = PointerSentinelConfig(
        vocab_size=len(tok),
        embedding_size=8,
        hidden_size=8,
        pointer_window=4,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
        pad_token_id=tok.eos_token_id,
    )
    return PointerSentinelForCausalLM(cfg).eval(), tok


def test_pipeline_text_is_spaced_and_batched():
    m, tok = small_lm_and_tokenizer()
    pipe = pipeline("text-generation", model=m, tokenizer=tok)
    out = pipe("the cat sat", max_new_tokens=4, do_sample=False)[0]["generated_text"]
    words = out.split(" ")
    assert out.startswith("the cat sat ") and len(words) == 7 and all(words), out
    new = pipe("the cat sat", max_new_tokens=4, do_sample=False, return_full_text=False)[0]["generated_text"]
    assert out == "the cat sat" + new
    batched = pipe(["the cat", "a dog saw the"], max_new_tokens=3, do_sample=False, batch_size=2)
    alone = pipe("the cat", max_new_tokens=3, do_sample=False)
    assert batched[0][0]["generated_text"] == alone[0]["generated_text"]


def test_pipeline_from_saved_directory_in_fresh_process(tmp_path):
    m, tok = small_lm_and_tokenizer()
    m.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    want = pipeline("text-generation", model=m, tokenizer=tok)("the dog", max_new_tokens=5, do_sample=False)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    code = f"""
        import sys; sys.modules["modeling_pointer_sentinel"] = None
        from transformers import pipeline
        pipe = pipeline("text-generation", model={str(tmp_path)!r}, trust_remote_code=True)
        print(pipe("the dog", max_new_tokens=5, do_sample=False)[0]["generated_text"])
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == want[0]["generated_text"]


def test_pointer_mix_switch_survives_save_and_load(tmp_path, capsys):
    """Regression: the switch lived in the generation config, which from_pretrained rebuilt without it, so
    generate(..., pointer_mix=False) and examples/generate.py --no_pointer_mix raised 'model_kwargs are not used'."""
    tok = build_word_level_tokenizer(["a b c a b c d", "e f a"])
    tiny_model(pointer_window=6, vocab_size=len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    m = PointerSentinelForCausalLM.from_pretrained(tmp_path).eval()
    x = torch.tensor([[1, 2, 3, 1, 2]])
    off = gen(m, x, do_sample=False, output_scores=True, return_dict_in_generate=True, pointer_mix=False)
    want = torch.log_softmax(m(x).vocab_logits[:, -1], -1)
    torch.testing.assert_close(torch.log_softmax(off.scores[0], -1), want, atol=1e-5, rtol=1e-5)
    on = gen(m, x, do_sample=False, output_scores=True, return_dict_in_generate=True)
    torch.testing.assert_close(on.scores[0], m(x).logits[:, -1], atol=1e-5, rtol=1e-5)
    assert not hasattr(m.generation_config, "pointer_mix")  # the user's config object is left alone

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "examples"))
    from generate import main

    main([str(tmp_path), "--prompt", "a b", "--max_new_tokens", "3", "--no_pointer_mix"])
    main([str(tmp_path), "--prompt", "a b", "--max_new_tokens", "3", "--show_gate"])
    printed = capsys.readouterr().out
    assert "from_pointer=" in printed and printed.count("\na b") + printed.startswith("a b") == 2
