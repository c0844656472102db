"""The text-generation pipeline of the Pointer Sentinel-LSTM folders: the continuation is written as running text
after the prompt. With placeholders each prompt keeps its table of out-of-vocabulary words, so the continuation writes
the words the pointer copied, and batched prompts (left-padded) never mix theirs; in spell mode the ids carry them.

The model folders name this class in config.json's `custom_pipelines`, so
`pipeline("text-generation", model=folder, trust_remote_code=True)` runs it. With model and tokenizer objects, pass
`pipeline_class=PointerSentinelTextGenerationPipeline`.

- preprocess: the tokenizer's table of the prompt (`BatchEncoding.oov_words`, one row) travels with the prompt as the
  key `oov_words` (a batch collates one table per row); it does not reach `generate`. A model with fewer placeholder
  columns than the tokenizer (`config.oov_slots`, none before the open vocabulary) reads the words it has no column
  for as `<unk>`.
- postprocess: the continuation is the text that `decode(prompt + new)` adds to `decode(prompt)`, with the prompt's
  table, so the joins of the text rules (`'s`, `,`, a closing quote) and the space between prompt and continuation
  come out as in running text (a batch's left padding, `<eos>` before the prompt, adds the same to both). `<eos>`,
  the corpus's line break, is written as one inside the continuation; the run of `<eos>` that ends it (the end of
  generation and the padding after it) is dropped unless `skip_special_tokens=False`. `<unk>` is a word: it is never
  dropped (generation suppresses it by default).
"""

from transformers import TextGenerationPipeline
from transformers.pipelines.text_generation import Chat, ReturnType


def _writes_words(tokenizer) -> bool:
    """Whether the tokenizer is the open-vocabulary word-level one (duck-typed: remote code has its own class)."""
    return hasattr(tokenizer, "oov_slots") and hasattr(tokenizer, "word_vocab_size")


def continuation(tokenizer, prompt: list[int], new: list[int], table: list[str] | None) -> str:
    """The text that `new` adds after `prompt`, as running text: what decode(prompt + new) adds to decode(prompt),
    with the prompt's table of words the vocabulary lacks, so the text rules' joins (`'s`, `,`, a closing quote) and
    the space before the continuation come out right."""
    kw = {} if table is None else {"oov_words": table}  # spell mode: the ids carry the words
    head = tokenizer.decode(prompt, **kw)
    whole = tokenizer.decode(prompt + new, **kw)
    if whole.startswith(head):
        return whole[len(head) :]
    return " " + tokenizer.decode(new, **kw)  # a join that rewrote the prompt's text: continue it


class PointerSentinelTextGenerationPipeline(TextGenerationPipeline):
    def preprocess(self, prompt_text, **kwargs):
        inputs = super().preprocess(prompt_text, **kwargs)
        if isinstance(prompt_text, Chat) or not _writes_words(self.tokenizer):
            return inputs
        if getattr(self.tokenizer, "spell_unseen", False):  # the ids spell the words: running text, no table
            inputs["oov_words"] = None
            return inputs
        tables = getattr(inputs, "oov_words", None)
        inputs["oov_words"] = list(tables[0]) if tables else []
        ids = inputs["input_ids"]
        # the placeholders the model has columns for: V + config.oov_slots (none where the config does not say)
        limit = self.tokenizer.word_vocab_size + min(getattr(self.model.config, "oov_slots", 0) or 0,
                                                     self.tokenizer.oov_slots)  # fmt: skip
        beyond = (ids >= limit) & (ids < self.tokenizer.word_vocab_size + self.tokenizer.oov_slots)  # added: words
        if beyond.any():
            inputs["input_ids"] = ids.masked_fill(beyond, self.tokenizer.unk_token_id)
        return inputs

    def _forward(self, model_inputs, **generate_kwargs):
        kept = {k: model_inputs.pop(k) for k in ("oov_words",) if k in model_inputs}
        return {**super()._forward(model_inputs, **generate_kwargs), **kept}

    def postprocess(self, model_outputs, return_type=ReturnType.FULL_TEXT, clean_up_tokenization_spaces=None,
                    continue_final_message=None, skip_special_tokens=None, tools=None):  # fmt: skip
        words = "oov_words" in model_outputs
        table = model_outputs.pop("oov_words", None)
        prompt_text = model_outputs["prompt_text"]
        if not words or return_type == ReturnType.TENSORS or not isinstance(prompt_text, str):
            return super().postprocess(model_outputs, return_type, clean_up_tokenization_spaces,
                                       continue_final_message, skip_special_tokens, tools)  # fmt: skip
        input_ids = model_outputs["input_ids"]
        n_prompt = 0 if input_ids is None else input_ids.shape[-1]  # the prompt's length with its left padding
        skip = True if skip_special_tokens is None else skip_special_tokens
        ends = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        known = {"generated_sequence", "input_ids", "prompt_text"}
        other = {k: v[0].numpy().tolist() for k, v in model_outputs.items() if k not in known and hasattr(v, "numpy")}
        records = []
        for idx, sequence in enumerate(model_outputs["generated_sequence"][0].numpy().tolist()):
            prompt, new = sequence[:n_prompt], sequence[n_prompt:]
            while skip and new and new[-1] in ends:
                new.pop()
            text = continuation(self.tokenizer, prompt, new, table)
            if return_type == ReturnType.FULL_TEXT:
                if prompt_text[-1:].isspace():
                    text = text.removeprefix(" ")
                text = prompt_text + text
            records.append({"generated_text": text, **{k: v[idx] for k, v in other.items()}})
        return records


# config.json's entry that makes `pipeline("text-generation", model=folder, trust_remote_code=True)` run this class
CUSTOM_PIPELINES = {
    "text-generation": {
        "impl": "pipeline_pointer_sentinel.PointerSentinelTextGenerationPipeline",
        "pt": ["AutoModelForCausalLM"],
        "type": "text",
    }
}


def ship_pipeline(folder) -> None:
    """Put this pipeline into a saved model folder: this file beside the model's code, and config.json's
    `custom_pipelines` entry (the rest of config.json as it was; transformers' own layout)."""
    import json
    import shutil
    from pathlib import Path

    folder = Path(folder)
    shutil.copyfile(__file__, folder / Path(__file__).name)
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config["custom_pipelines"] = CUSTOM_PIPELINES
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
