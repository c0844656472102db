import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import tiny_model
from transformers import AutoTokenizer

from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer


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
