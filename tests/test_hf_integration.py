import ast
import inspect
import json
import os
import subprocess
import sys
import textwrap
import tomllib

import pytest
import torch
import transformers
from conftest import ROOT, tiny_model
from transformers import AutoTokenizer, GenerationMixin, PreTrainedModel
from transformers.generation import utils as generation_utils

from modeling_pointer_sentinel import generation_pointer_sentinel, modeling_pointer_sentinel
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

PACKAGE = ROOT / "modeling_pointer_sentinel"
# The remote code: save_pretrained writes these beside the weights, and each pretrained/ folder carries them.
CODE_FILES = ("configuration_pointer_sentinel.py", "modeling_pointer_sentinel.py", "generation_pointer_sentinel.py")


def run_fresh(code: str, cwd, with_stderr: bool = False) -> str:
    """Run code in a new interpreter where this package is NOT importable (only the saved directory is), with
    standard input closed (a prompt for input fails instead of waiting)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    # The editable install would make the package importable; block it so only the saved code can serve.
    probe = "import sys; sys.modules['modeling_pointer_sentinel'] = None\n"
    done = subprocess.run(
        [sys.executable, "-c", probe + textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr if with_stderr else done.stdout


@pytest.mark.parametrize(
    "softmax", [{}, dict(adaptive_softmax_cutoffs=[4, 10], adaptive_softmax_div_value=2.0)], ids=["full", "adaptive"]
)
def test_save_and_reload_through_remote_code_in_fresh_process(tmp_path, softmax):
    model = tiny_model(tie_word_embeddings=True, **softmax).eval()
    ids = torch.tensor([[1, 2, 3, 1, 2, 4, 1]])
    want = model(ids)
    model.save_pretrained(tmp_path / "m")
    torch.save({"ids": ids, "logits": want.logits, "gate": want.gate}, tmp_path / "want.pt")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForCausalLM"}
    for name in CODE_FILES:  # save_pretrained copies the modeling file's relative imports beside it
        assert (tmp_path / "m" / name).read_text() == (PACKAGE / name).read_text(), name
    out = run_fresh(
        """
        import torch
        try:
            import modeling_pointer_sentinel
            raise AssertionError("package must not be importable here")
        except ImportError:
            pass
        from transformers import AutoModel, AutoModelForCausalLM
        m = AutoModelForCausalLM.from_pretrained("m", trust_remote_code=True).eval()
        w = torch.load("want.pt")
        o = m(w["ids"])
        torch.testing.assert_close(o.logits, w["logits"]); torch.testing.assert_close(o.gate, w["gate"])
        assert m.lm_head.weight is m.model.embed_tokens.weight, "tied weights came back untied"
        assert m.dtype == torch.float32
        base = AutoModel.from_pretrained("m", trust_remote_code=True)
        assert type(base).__name__ == "PointerSentinelModel"
        # generate's fast decode step, from the folder's generation module: each step's scores are forward's mixture
        out = m.generate(w["ids"], max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True,
                         pad_token_id=0)
        for k, scores in enumerate(out.scores):
            forward = m(out.sequences[:, : w["ids"].shape[1] + k]).logits[:, -1]
            torch.testing.assert_close(scores, forward, atol=1e-5, rtol=1e-5, msg=f"step {k}")
        assert any(c.__module__.endswith(".generation_pointer_sentinel") for c in type(m).__mro__)
        print("OK", type(m).__module__)
        """,
        cwd=tmp_path,
    )
    assert out.startswith("OK transformers_modules")


def test_reload_with_package_imported_uses_registered_classes(tmp_path):
    from transformers import AutoModelForCausalLM

    from modeling_pointer_sentinel import PointerSentinelForCausalLM

    model = tiny_model(gate_type="switch", weight_drop=0.2).eval()
    model.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert isinstance(again, PointerSentinelForCausalLM)
    assert again.config.gate_type == "switch" and again.config.weight_drop == 0.2
    for (n, p), (_, q) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        torch.testing.assert_close(p, q, msg=n)


# transformers' private generate API that generation_pointer_sentinel.py overrides or calls: each name, the parameters
# the code there assumes (as transformers 5.23 has them). A release that renames, drops or reorders one fails here.
PRIVATE_HOOKS = {
    "_sample": ["self", "input_ids", "logits_processor", "stopping_criteria", "generation_config", "synced_gpus",
                "streamer", "model_kwargs"],
    "_prefill": ["self", "input_ids", "generation_config", "model_kwargs", "is_first_iteration"],
    "_update_model_kwargs_for_generation": ["self", "outputs", "model_kwargs", "is_encoder_decoder", "num_new_tokens"],
    "_prepare_cache_for_generation": ["self", "generation_config", "model_kwargs", "generation_mode", "batch_size",
                                      "max_cache_length"],
    "_get_logits_processor": ["self", "generation_config", "input_ids_seq_length", "encoder_input_ids",
                              "prefix_allowed_tokens_fn", "logits_processor", "device", "model_kwargs",
                              "negative_prompt_ids", "negative_prompt_attention_mask"],
    "_supports_default_dynamic_cache": [],  # a classmethod
}  # fmt: skip
OVERRIDDEN = {"generate", "_sample", "_prepare_cache_for_generation", "_get_logits_processor",
              "_supports_default_dynamic_cache"}  # fmt: skip


def hook_message(hook: str, problem: str) -> str:
    pinned = next(d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
                  if d.startswith("transformers"))  # fmt: skip
    return (f"transformers {transformers.__version__} changed the private generate hook {hook} that "
            f"generation_pointer_sentinel.py relies on ({problem}); it is tested with {pinned}. Update the override "
            "there, then this test.")  # fmt: skip


@pytest.mark.parametrize("hook", sorted(PRIVATE_HOOKS))
def test_private_generate_hooks_are_what_the_overrides_assume(hook):
    method = getattr(GenerationMixin, hook, None)
    assert method is not None, hook_message(f"GenerationMixin.{hook}", "it is gone")
    got = list(inspect.signature(method).parameters)
    assert got == PRIVATE_HOOKS[hook], hook_message(f"GenerationMixin.{hook}", f"parameters {got}")


def test_private_generate_state_is_what_the_overrides_assume():
    """The private names generate reads that the model sets or reads: `_is_stateful` (no assisted decoding),
    `_is_user_defined` (a cache the caller passed is returned), `_pad_token_tensor` (padding of finished rows), and
    greedy search and sampling dispatched to `_sample`."""
    source = inspect.getsource(GenerationMixin)
    modes = generation_utils.GENERATION_MODES_MAPPING
    got = {
        m.name: modes.get(m)
        for m in (generation_utils.GenerationMode.GREEDY_SEARCH, generation_utils.GenerationMode.SAMPLE)
    }
    assert set(got.values()) == {"_sample"}, hook_message("GENERATION_MODES_MAPPING", f"greedy and sampling run {got}")
    assert hasattr(PreTrainedModel, "_is_stateful") and "self._is_stateful" in source, hook_message(
        "_is_stateful", "generate no longer reads it"
    )
    assert '"_is_user_defined"' in source, hook_message("_is_user_defined", "generate no longer reads it")
    assert "generation_config._pad_token_tensor = " in source, hook_message("_pad_token_tensor", "no longer set")


def test_each_generate_override_stands_in_one_place():
    """The overrides of generate's hooks live in `PointerSentinelGenerationMixin` alone, and the model runs them."""
    from modeling_pointer_sentinel import PointerSentinelForCausalLM

    mixin = generation_pointer_sentinel.PointerSentinelGenerationMixin
    assert OVERRIDDEN <= set(vars(mixin)), sorted(OVERRIDDEN - set(vars(mixin)))
    for module in (modeling_pointer_sentinel, generation_pointer_sentinel):
        for cls in (c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == module.__name__):
            if cls is not mixin:
                assert not OVERRIDDEN & set(vars(cls)), f"{cls.__name__} overrides {OVERRIDDEN & set(vars(cls))}"
    for hook in OVERRIDDEN:
        assert getattr(PointerSentinelForCausalLM, hook).__qualname__.startswith(mixin.__name__), hook


def test_modeling_file_is_the_paper_and_generation_is_its_own_module():
    """modeling_pointer_sentinel.py holds §2 (LSTM, pointer, mixture, loss, the models) and the decode step, forward at
    T = 1; generation_pointer_sentinel.py the cache and generate's glue, and no maths: it defines none of the modeling
    file's names (tests/test_layering.py: and imports nothing from it)."""

    def defined(name):
        tree = ast.parse((PACKAGE / name).read_text())
        return {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}

    modeling, generation = defined("modeling_pointer_sentinel.py"), defined("generation_pointer_sentinel.py")
    assert not modeling & set(generation_pointer_sentinel.__all__), "defined in both"
    assert {"decode_step", "pack_weights", "pointer_mixture", "lstm_cell", "AdaptiveSoftmax"} <= modeling
    assert not generation & set(modeling_pointer_sentinel.__all__), "the modeling file's names, defined in generation"


def test_tokenizer_vocab_sizes_on_benchmark_corpora(shared_data):
    ptb = build_word_level_tokenizer(open(shared_data / "ptb" / "ptb.train.txt"))
    wt2 = build_word_level_tokenizer(open(shared_data / "wikitext-2" / "wiki.train.tokens"))
    assert len(ptb) == 10_000
    assert len(wt2) == 33_278


def test_tokenizer_round_trip_and_spacing(tmp_path):
    tok = build_word_level_tokenizer(["the cat sat on the mat", "the dog <unk> ran"])
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again.get_vocab() == tok.get_vocab()
    ids = again("the cat flew")["input_ids"]
    assert ids[-1] == again.convert_tokens_to_ids("<unk>")  # out-of-vocabulary -> <unk>, no <eos> appended
    assert again.decode(ids) == " the cat <unk>"  # <unk> is an ordinary word, kept by skip_special_tokens
    assert again.decode(ids, skip_special_tokens=True) == " the cat <unk>"
    assert again.eos_token == again.pad_token == "<eos>" and again.padding_side == "left"
    # decoding in pieces concatenates to the whole (what the text-generation pipeline relies on)
    assert again.decode(ids[:1]) + again.decode(ids[1:]) == again.decode(ids)


def old_tokenizer(lines):
    """A word-level tokenizer as saved before the line-break rule (no normalizer, `<eos>` decoded as a word): such
    folders exist in users' hands and must keep working."""
    from tokenizers import Regex, decoders

    tok = build_word_level_tokenizer(lines)
    tok.backend_tokenizer.normalizer = None
    tok.backend_tokenizer.decoder = decoders.Sequence([decoders.Replace(Regex("^"), " "), decoders.Fuse()])
    return tok


def data_code_ids(tok, path):
    """The ids of a file as the training and evaluation scripts read it (datasets' line cutting, encode_lines)."""
    from modeling_pointer_sentinel.training import encode_lines, load_text_splits

    return encode_lines(tok, load_text_splits(test_file=str(path))["test"]).tolist()


def test_line_breaks_are_eos_in_the_tokenizer_as_in_the_data_code(tmp_path):
    from modeling_pointer_sentinel.training import encode_lines

    tok = build_word_level_tokenizer(["the cat sat on the mat", "the dog ran"])
    tok.save_pretrained(tmp_path / "tok")
    tok = AutoTokenizer.from_pretrained(tmp_path / "tok")
    eos, cat = tok.eos_token_id, tok.convert_tokens_to_ids("cat")
    assert tok("the cat\nsat")["input_ids"] == tok("the cat")["input_ids"] + [eos] + tok("sat")["input_ids"]
    # every line end the data loader cuts at (universal newlines), empty lines, a last line without a break
    text = "the cat sat\r\n\n on the  mat \rthe dog ran\nzebra\n\nthe cat"
    (tmp_path / "t.txt").write_bytes(text.encode())
    assert tok(text + "\n")["input_ids"] == data_code_ids(tok, tmp_path / "t.txt")
    assert tok(text)["input_ids"].count(eos) == 6 and tok(text)["input_ids"][-1] == cat
    assert encode_lines(tok, ["the cat", "", "sat"]).tolist() == tok("the cat\n\nsat\n")["input_ids"]
    # <eos> decodes to a line break, so decoded text keeps its lines and encodes back to the same ids
    ids = tok("the cat\nthe dog\n")["input_ids"]
    assert tok.decode(ids) == " the cat\n the dog\n"
    assert tok(tok.decode(ids))["input_ids"] == ids
    assert tok.decode(ids, skip_special_tokens=True) == " the cat the dog"  # <eos> is special (eos, pad, bos)
    assert "".join(tok.decode([i]) for i in ids) == tok.decode(ids)


def test_tokenizer_saved_before_the_line_rule_still_gives_one_eos_per_line(tmp_path):
    from modeling_pointer_sentinel.tokenization import add_line_rule, ends_lines_with_eos
    from modeling_pointer_sentinel.training import encode_lines

    lines = ["the cat sat", "", "the dog ran on the mat"]
    old_tokenizer(lines).save_pretrained(tmp_path / "old")
    old = AutoTokenizer.from_pretrained(tmp_path / "old")
    new = build_word_level_tokenizer(lines)
    assert old.get_vocab() == new.get_vocab() and not ends_lines_with_eos(old) and ends_lines_with_eos(new)
    want = new("\n".join(lines) + "\n")["input_ids"]
    assert encode_lines(old, lines).tolist() == encode_lines(new, lines).tolist() == want
    assert want.count(old.eos_token_id) == 3
    add_line_rule(old).save_pretrained(tmp_path / "upgraded")  # what examples/export_pretrained.py does
    upgraded = AutoTokenizer.from_pretrained(tmp_path / "upgraded")
    assert upgraded("\n".join(lines) + "\n")["input_ids"] == want and upgraded.decode(want) == new.decode(want)


def _same_ids_as_data_code(train, test):
    tok = build_word_level_tokenizer(open(train))
    whole = tok(open(test, newline="").read())["input_ids"]  # the file's text as a client would pass it
    assert whole == data_code_ids(tok, test)
    assert whole.count(tok.eos_token_id) == len(open(test).read().splitlines())


def test_tokenizer_and_data_code_agree_on_bundled_wikitext2_test():
    import lzma

    from modeling_pointer_sentinel.training import BUNDLED

    tok = build_word_level_tokenizer(lzma.open(BUNDLED / "wiki.train.tokens.xz", "rt"))
    test = BUNDLED / "wiki.test.tokens.xz"
    whole = tok(lzma.open(test, "rt", newline="").read())["input_ids"]
    assert whole == data_code_ids(tok, test)
    assert whole.count(tok.eos_token_id) == len(lzma.open(test, "rt").read().splitlines())


def test_tokenizer_and_data_code_agree_on_ptb_test(shared_data):
    _same_ids_as_data_code(shared_data / "ptb" / "ptb.train.txt", shared_data / "ptb" / "ptb.test.txt")
