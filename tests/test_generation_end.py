"""What ends generation in the shipped folders: only the length. `<eos>` is both corpora's line break (PTB: a sentence's
end, WikiText-2: a paragraph's or heading's) and neither marks the end of a text, so the shipped generation_config.json
names no end token and a prompt that ends its sentence gets the next line rather than nothing."""

import json

import pytest
import torch
from conftest import ROOT
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

import modeling_pointer_sentinel  # noqa: F401  (registers the Auto classes)

PRETRAINED = ROOT / "pretrained"
SHIPPED = sorted(p.name for p in PRETRAINED.iterdir() if (p / "config.json").is_file())
POINTER = [name for name in SHIPPED if "pointer" in name]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_generation_config_names_no_end_token(name):
    """No eos_token_id, also not one taken over from config.json, and no pad token (see the next test)."""
    gen = AutoModelForCausalLM.from_pretrained(PRETRAINED / name, dtype=torch.float32).generation_config
    assert json.loads((PRETRAINED / name / "config.json").read_text())["eos_token_id"] is not None
    assert gen.eos_token_id is None and gen.pad_token_id is None


@pytest.mark.parametrize("name", POINTER)
def test_a_prompts_line_breaks_are_not_taken_for_padding(name):
    """With a pad token and no end token, generate called without attention_mask masks every pad id of the prompt as
    padding: with <eos> the pad token, a prompt's line breaks would be dropped."""
    folder = PRETRAINED / name
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = AutoTokenizer.from_pretrained(folder)("\nThe company said\nthat", return_tensors="pt").input_ids
    assert (ids == model.config.eos_token_id).sum() == 2
    kw = dict(max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True)
    alone, masked = model.generate(ids, **kw), model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    torch.testing.assert_close(torch.stack(alone.scores), torch.stack(masked.scores))


@pytest.mark.parametrize("name", POINTER)
def test_whole_sentence_prompt_gets_a_greedy_continuation(name):
    """The case that ended at once: both shipped pointer models' first greedy token after this sentence is <eos> (the
    one fine-tuned to copy writes a word first). Through each folder's own pipeline the continuation goes on past it
    and holds words."""
    ended_at_once = {"ptb-pointer-sentinel-lstm-2x200", "wt2-pointer-sentinel-lstm-2x200"}
    assert ended_at_once <= set(POINTER)  # not skipped
    generator = pipeline("text-generation", model=str(PRETRAINED / name), trust_remote_code=True, dtype=torch.float32)
    prompt = "The game was released in Japan in 2011."
    first = generator(prompt, max_new_tokens=1, do_sample=False, return_tensors=True)[0]["generated_token_ids"][-1]
    assert (first == generator.tokenizer.eos_token_id) == (name in ended_at_once)
    text = generator(prompt, max_new_tokens=20, do_sample=False)[0]["generated_text"]
    assert text.startswith(prompt) and any(c.isalpha() for c in text[len(prompt) :])
