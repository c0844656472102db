"""transformers conventions a user relies on: Trainer, shift_labels, padding, loading, generate kwargs, the card."""

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_model
from test_hf_integration import run_fresh

from modeling_pointer_sentinel import pointer_mixture
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "softmax", [{}, dict(adaptive_softmax_cutoffs=[4, 10], adaptive_softmax_div_value=2.0)], ids=["full", "adaptive"]
)
def test_trainer_trains_evaluates_and_predicts_like_a_gpt2(tmp_path, softmax):
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    model = tiny_model(**softmax)
    g = torch.Generator().manual_seed(0)
    # Equal lengths: per-batch means average to the global mean. The adaptive softmax sees words of every cluster.
    rows = torch.randint(0, 23 if softmax else 6, (12, 10), generator=g)
    ds = Dataset.from_dict({"input_ids": rows.tolist(), "labels": rows.tolist()})
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, per_device_eval_batch_size=4,
                             num_train_epochs=1, learning_rate=1e-2, report_to=[], use_cpu=True, save_strategy="no",
                             logging_steps=1)  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=ds, eval_dataset=ds)
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    model.eval()
    with torch.no_grad():
        out = model(rows, labels=rows)
    want = -out.target_log_probs[:, :-1].double().mean().item()
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] == pytest.approx(want, rel=1e-5)
    pred = trainer.predict(ds)
    assert pred.metrics["test_loss"] == pytest.approx(want, rel=1e-5)
    assert isinstance(pred.predictions, np.ndarray), type(pred.predictions)  # the logits alone, not a tuple
    assert pred.predictions.shape == (12, 10, 23)
    np.testing.assert_allclose(pred.predictions, out.logits.numpy(), rtol=1e-5, atol=1e-5)


def test_group_lines_gives_trainer_train_py_stream_with_every_eos_label_counted(tmp_path):
    """The blocks concatenate to encode_lines' stream (train.py's: <eos> after every line, empty lines included),
    and through Trainer's default collator every <eos> is a target: eval_loss is the mean over all T-1 targets
    of each block. DataCollatorForLanguageModeling(mlm=False) would drop them (pad token = <eos>)."""
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments, default_data_collator

    from modeling_pointer_sentinel.training import encode_lines, group_lines

    lines = ["the game was released", "", "the game of the year", "was the year", "released in the year", "game"]
    tok = build_word_level_tokenizer(lines)
    eos, T = tok.eos_token_id, 4
    stream = encode_lines(tok, lines)
    for data in (lines, Dataset.from_dict({"text": lines})):
        blocks = group_lines(data, tok, T)
        ids = torch.tensor(blocks["input_ids"])
        assert ids.shape[1] == T and torch.equal(torch.tensor(blocks["labels"]), ids)
        assert torch.equal(ids.flatten(), stream[: ids.numel()]) and stream.numel() - ids.numel() < T
    batch = default_data_collator([blocks[i] for i in range(len(blocks))])
    assert (batch["labels"] == eos).sum() == (ids == eos).sum() > 0 and (batch["labels"] == -100).sum() == 0
    dropped = DataCollatorForLanguageModeling(tok, mlm=False)([blocks[i] for i in range(len(blocks))])["labels"]
    assert (dropped == eos).sum() == 0  # why the README recommends default_data_collator

    model = tiny_model(vocab_size=len(tok), eos_token_id=eos).eval()
    with torch.no_grad():
        want = -model(ids, labels=ids).target_log_probs[:, :-1].double().mean().item()
    args = TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=2, report_to=[], use_cpu=True)
    trainer = Trainer(model=model, args=args, eval_dataset=blocks, data_collator=default_data_collator)
    assert trainer.evaluate()["eval_loss"] == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="block_size must be >= 2"):
        group_lines(lines, tok, 1)


def test_shift_labels_win_over_labels():
    model = tiny_model().eval()
    ids = torch.randint(0, 6, (2, 8), generator=torch.Generator().manual_seed(1))
    shifted = torch.randint(0, 6, (2, 8), generator=torch.Generator().manual_seed(2))
    both = model(ids, labels=ids, shift_labels=shifted).loss
    torch.testing.assert_close(both, model(ids, shift_labels=shifted).loss)
    assert not torch.allclose(both, model(ids, labels=ids).loss)


def test_right_padded_chunk_keeps_the_last_real_positions_for_the_next_call():
    """A right-padded chunk followed by a continuation equals the unpadded run: padding never evicts real tokens
    from the pointer window."""
    model = tiny_model(pointer_window=4).eval()
    a = torch.tensor([[3, 1, 4, 1, 5]])
    padded = torch.cat([a, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.tensor([[1] * 5 + [0] * 3])
    nxt = torch.tensor([[1, 2]])
    want = model(nxt, past_key_values=model(a, use_cache=True).past_key_values).logits
    first = model(padded, attention_mask=mask, use_cache=True)
    got = model(nxt, attention_mask=torch.cat([mask, torch.ones(1, 2, dtype=mask.dtype)], 1),
                past_key_values=first.past_key_values).logits  # fmt: skip
    torch.testing.assert_close(got, want)


def test_pointer_mixture_is_finite_on_both_paths_when_the_gate_vanishes_or_entries_are_minus_inf():
    V, L = 7, 4
    vocab = torch.log_softmax(torch.randn(2, V, dtype=torch.float64), -1)
    vocab[:, 3] = -torch.inf  # a window word the vocabulary softmax gives no mass
    ids = torch.tensor([[3, 1, 3, 5], [0, 0, 2, 3]])
    a = torch.softmax(torch.randn(2, L, dtype=torch.float64), -1)
    for log_gate in (torch.full((2,), -torch.inf, dtype=torch.float64), torch.full((2,), -800.0, dtype=torch.float64)):
        gate = log_gate.exp()
        dense = gate[:, None] * vocab.exp() + torch.zeros(2, V, dtype=torch.float64).scatter_add(-1, ids, a)
        with torch.no_grad():
            fast = pointer_mixture(vocab, log_gate, a.log(), ids)
        v, lg, log_a = (t.clone().requires_grad_() for t in (vocab, log_gate, a.log()))
        safe = pointer_mixture(v, lg, log_a, ids)
        for got in (fast, safe.detach()):
            torch.testing.assert_close(got.exp(), dense)
            in_window = torch.zeros(2, V, dtype=torch.bool).scatter(-1, ids, True)
            assert torch.isfinite(got[in_window]).all()
        safe[in_window].sum().backward()
        for t in (v, lg, log_a):
            assert t.grad is None or torch.isfinite(t.grad).all()
        # d/d(log a_i) of the sum over window words of log p: a_i / p(x_i), once per slot
        torch.testing.assert_close(log_a.grad, a / dense.gather(-1, ids))


@pytest.mark.parametrize("open_vocabulary", [False, True])
def test_reorder_cache_moves_every_tensor_with_its_row(open_vocabulary):
    kw = dict(oov_slots=4, unk_token_id=3, oov_pointer=True) if open_vocabulary else {}  # its c_i too
    model = tiny_model(**kw).eval()
    ids = torch.randint(0, 23, (3, 6), generator=torch.Generator().manual_seed(3))
    cache = model(ids, use_cache=True).past_key_values
    rows = [model(ids[i : i + 1], use_cache=True).past_key_values for i in range(3)]
    order = torch.tensor([2, 0, 1])
    cache.reorder_cache(order)
    for new_row, old_row in enumerate(order.tolist()):
        single = rows[old_row]
        for name in ("window_states", "window_ids", "window_mask") + (("window_context",) if open_vocabulary else ()):
            torch.testing.assert_close(getattr(cache, name)[new_row], getattr(single, name)[0], msg=name)
        for k in range(len(cache.hidden)):
            torch.testing.assert_close(cache.hidden[k][new_row], single.hidden[k][0])
            torch.testing.assert_close(cache.cell[k][new_row], single.cell[k][0])


def test_generate_pointer_mix_false_passes_no_generation_config_with_kwargs(caplog):
    model = tiny_model().eval()
    prompt = torch.tensor([[1, 2, 3, 1]])
    with caplog.at_level(logging.WARNING, logger="transformers"):
        out = model.generate(prompt, max_new_tokens=3, do_sample=False, pointer_mix=False, pad_token_id=0,
                             output_scores=True, return_dict_in_generate=True)  # fmt: skip
    assert not [r for r in caplog.records if "generation_config" in r.getMessage()], caplog.text
    with torch.no_grad():
        vocab = torch.log_softmax(model(prompt).vocab_logits[:, -1], -1)
    torch.testing.assert_close(torch.log_softmax(out.scores[0], -1), vocab)  # the vocabulary softmax alone
    assert model.generation_config.to_dict() == tiny_model().generation_config.to_dict()


def test_base_model_from_a_causal_lm_checkpoint_reports_nothing_unexpected(tmp_path, capsys, caplog):
    from transformers import AutoModel

    tiny_model().save_pretrained(tmp_path)
    with caplog.at_level(logging.INFO):
        AutoModel.from_pretrained(tmp_path)
    shown = capsys.readouterr().out + capsys.readouterr().err + caplog.text
    assert "UNEXPECTED" not in shown and "lm_head" not in shown and "pointer." not in shown, shown


def config_warnings(caplog, folder):
    from transformers import AutoModelForCausalLM

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="modeling_pointer_sentinel"):
        model = AutoModelForCausalLM.from_pretrained(folder)
    return model, [r.getMessage() for r in caplog.records if "unknown key" in r.getMessage()]


def test_misspelt_config_key_warns_naming_the_field_and_transformers_keys_do_not(tmp_path, caplog):
    """transformers keeps unknown config keys as attributes (configs from newer versions load), so a typo cannot
    raise; it must not pass silently either. The keys transformers writes (and the older torch_dtype) stay quiet."""
    tiny_model(pointer_window=7).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    saved = json.loads(path.read_text())
    assert {"transformers_version", "architectures", "auto_map", "dtype", "model_type"} <= set(saved)
    path.write_text(json.dumps({**saved, "torch_dtype": "float32"}))
    model, warned = config_warnings(caplog, tmp_path)
    assert warned == [] and model.config.pointer_window == 7
    del saved["pointer_window"]
    path.write_text(json.dumps({**saved, "pointer_windw": 7}))
    model, warned = config_warnings(caplog, tmp_path)
    assert model.config.pointer_window == 100  # the default: what the warning is there to reveal
    assert len(warned) == 1 and "'pointer_windw'" in warned[0] and "did you mean 'pointer_window'" in warned[0]


def test_damaged_weights_file_gives_one_error_naming_the_folder(tmp_path):
    from transformers import AutoModelForCausalLM

    tiny_model().save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(OSError, match=re.escape(str(tmp_path))) as info:
        AutoModelForCausalLM.from_pretrained(tmp_path)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def card_snippet() -> str:
    text = (ROOT / "model_card.md").read_text()
    return re.search(r"## How to use\s+```python\n(.*?)```", text, re.S).group(1)


def test_model_card_snippet_runs_in_a_fresh_process_with_stdin_closed(tmp_path):
    """No trust_remote_code prompt (it would block) and no model-type mismatch warning, on a folder laid out as the
    shipped ones (a spelling tokenizer and the speller, the folder's own pipeline; the snippet samples unseeded, and
    a placeholder model may write a new slot, `<oov-k>` in its text)."""
    from modeling_pointer_sentinel.pipeline_pointer_sentinel import ship_pipeline
    from modeling_pointer_sentinel.tokenization import spelling_vocabulary

    tok = spelling_vocabulary(build_word_level_tokenizer(["The game was released in the game of the year"] * 3))
    model = tiny_model(vocab_size=tok.word_vocab_size, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
                       bos_token_id=tok.eos_token_id, oov_slots=8, pointer_window=5, unk_token_id=tok.unk_token_id,
                       speller_size=6)  # fmt: skip
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    ship_pipeline(tmp_path / "m")
    code = card_snippet().replace("path/to/model", str(tmp_path / "m"))
    out = run_fresh(code + "\nimport sys; print('STDERR-CHECK', file=sys.stderr)\nprint('DONE')\n", cwd=tmp_path,
                    with_stderr=True)  # fmt: skip
    assert "DONE" in out and "Do you wish to run the custom code" not in out, out
    assert "to instantiate a model of type" not in out, out
    assert "The game" in out and "<oov-" not in out, out


def test_generate_refuses_an_attention_mask_of_the_wrong_length():
    model = tiny_model().eval()
    with pytest.raises(ValueError, match="attention_mask of shape"):
        model.generate(torch.tensor([[1, 2, 3, 4, 5]]), attention_mask=torch.ones(1, 7, dtype=torch.long),
                       max_new_tokens=2, pad_token_id=0)  # fmt: skip
