"""The example scripts' command line: shared helpers in examples/cli.py, and invalid input ending in one line."""

import contextlib
import inspect
import os
import select
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, tiny_model
from transformers import AutoTokenizer

from modeling_pointer_sentinel import evaluation, plotting, training


def test_package_modules_hold_no_cli_or_plotting_code():
    """training.py holds data streams, the segment schedule and optimiser helpers; evaluation.py holds measures.
    Command-line helpers live in examples/cli.py, pictures in plotting.py and only there."""
    assert "argparse" not in inspect.getsource(training) and not hasattr(training, "add_data_arguments")
    assert "matplotlib" not in inspect.getsource(evaluation) and "def plot" not in inspect.getsource(evaluation)
    for name in ("plot_gate_histogram", "plot_bucket_differences", "pointer_window_picture"):
        assert callable(getattr(plotting, name)) and not hasattr(evaluation, name)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A tiny saved model and tokenizer whose vocabulary favours <eos>, so sampled continuations end at different
    lengths and the shorter ones are padded."""
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

    d = tmp_path_factory.mktemp("model")
    tok = build_word_level_tokenizer(["a b c a b c d", "e f a b"])
    eos = tok.eos_token_id
    model = tiny_model(vocab_size=len(tok), eos_token_id=eos, pad_token_id=eos, bos_token_id=eos)
    with torch.no_grad():
        model.lm_head.bias[eos] = 6.0
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def script_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    return {**env, "HF_HUB_OFFLINE": "1"}


def run_script(name, *args, cwd=None):
    cmd = [sys.executable, str(ROOT / "examples" / name), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd or ROOT, env=script_env())


CONFIG_MISTAKES = {
    "choice": ('{"optimizer": "adam"}', "optimizer must be one of"),
    "unknown key": ('{"learning_rat": 1}', "unknown keys in --config"),
    "unknown model field": ('{"model": {"hidden_sise": 4}}', "unknown model fields"),
    "type": ('{"bptt": 3.5}', "bptt must be an integer"),
    "bad JSON": ('{"optimizer": ', "is not valid JSON"),
}


@pytest.mark.parametrize("case", ["choice", "unknown key", "unknown model field", "type", "bad JSON", "missing config",
                                  "missing data file", "empty data file", "out of range"])  # fmt: skip
def test_train_script_invalid_input_ends_in_one_error_line(case, tmp_path):
    args = ["--output_dir", tmp_path / "out"]
    if case in CONFIG_MISTAKES:
        text, message = CONFIG_MISTAKES[case]
        (tmp_path / "c.json").write_text(text)
        args += ["--config", tmp_path / "c.json"]
    elif case == "missing config":
        args, message = args + ["--config", tmp_path / "nope.json"], "no such file"
    elif case == "out of range":  # every range is in tests/test_train.py; this one through the real command line
        args, message = args + ["--bptt", "0"], "--bptt must be a positive integer, got 0"
    elif case == "missing data file":
        args, message = args + ["--train_file", "nope.txt"], "does not exist"
    else:
        (tmp_path / "empty.txt").write_text("")
        args, message = args + ["--train_file", tmp_path / "empty.txt"], "is empty"
    assert_one_error_line(run_script("train.py", *args, cwd=tmp_path), message)
    assert not (tmp_path / "out" / "log.jsonl").exists()


def assert_one_error_line(done, message):
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0] == done.stderr.strip().splitlines()[-1], done.stderr[-3000:]
    assert ": error: " in errors[0] and message in errors[0], errors


def test_evaluate_and_generate_invalid_input_end_in_one_error_line(saved_model, tmp_path):
    assert_one_error_line(run_script("evaluate.py", tmp_path / "no_model"), "no such model folder")
    done = run_script("evaluate.py", saved_model, "--test_file", "nope.txt", cwd=tmp_path)
    assert_one_error_line(done, "--test_file nope.txt: no such file")
    assert_one_error_line(run_script("generate.py", tmp_path / "no_model"), "no such model folder")


def test_evaluate_num_threads_sets_torchs_cpu_threads(saved_model, tmp_path):
    """--num_threads, which the README's flag table promises for evaluate.py: accepted, and torch runs on that many
    CPU threads while it scores."""
    from conftest import evaluate_script

    text = tmp_path / "text.txt"
    text.write_text("a b c a b c d\ne f a b\n" * 20)
    before = torch.get_num_threads()
    try:
        results = evaluate_script()([str(saved_model), "--test_file", str(text), "--num_threads", str(before + 1),
                                     "--batch_size", "2", "--data_cache_dir", str(tmp_path / "cache")])  # fmt: skip
        assert torch.get_num_threads() == before + 1 and 0 < results["ppl"] < float("inf")
    finally:
        torch.set_num_threads(before)


def generate_main():
    sys.path.insert(0, str(ROOT / "examples"))
    from generate import main

    return main


class Done:  # what assert_one_error_line reads from a finished run
    def __init__(self, returncode, stderr):
        self.returncode, self.stderr = returncode, stderr


GENERATE_FLAG_MISTAKES = {
    "max_new_tokens -1": (["--max_new_tokens", "-1"], "--max_new_tokens must be >= 1"),
    "max_new_tokens 0": (["--max_new_tokens", "0"], "--max_new_tokens must be >= 1"),
    "temperature 0": (["--do_sample", "--temperature", "0"], "--temperature must be a number > 0"),
    "temperature nan": (["--do_sample", "--temperature", "nan"], "--temperature must be a number > 0"),
    "top_k -1": (["--top_k", "-1"], "--top_k must be >= 0"),
    "top_p 0": (["--top_p", "0"], "--top_p must be in (0, 1]"),
    "top_p 1.5": (["--top_p", "1.5"], "--top_p must be in (0, 1]"),
    "num_beams 0": (["--num_beams", "0"], "--num_beams must be >= 1"),
    "num_return_sequences 0": (["--num_return_sequences", "0"], "--num_return_sequences must be >= 1"),
    "repetition_penalty 0": (["--repetition_penalty", "0"], "--repetition_penalty must be a number > 0"),
    "seed -1": (["--seed", "-1"], "--seed must be in [0, 2**32)"),
    "more sequences than beams": (["--num_beams", "2", "--num_return_sequences", "3"], "must be <= --num_beams 2"),
    "several greedy sequences": (["--num_return_sequences", "2"], "needs --do_sample or --num_beams"),
    "show_gate without the mixture": (["--show_gate", "--no_pointer_mix"], "with --no_pointer_mix there is none"),
    "show_gate without a pointer": (["--show_gate"], "has no pointer (use_pointer=False)"),
}


@pytest.mark.parametrize("case", list(GENERATE_FLAG_MISTAKES))
def test_generate_out_of_range_flags_end_in_one_error_line(case, saved_model, tmp_path, capsys):
    folder = saved_model
    if case == "show_gate without a pointer":
        folder = tmp_path / "plain"
        tiny_model(use_pointer=False).save_pretrained(folder)
        AutoTokenizer.from_pretrained(saved_model).save_pretrained(folder)
    flags, message = GENERATE_FLAG_MISTAKES[case]
    with pytest.raises(SystemExit) as exit_info:
        generate_main()([str(folder), "--prompt", "a b", *flags])
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_error_line(Done(exit_info.value.code, captured.err), message)


def test_generate_pointer_shares_are_zero_off_the_window_and_match_the_gate_formula():
    """share(w) = sum_{i: x_i = w} a_i / p_mix(w), checked against 1 - g p_vocab(w) / p_mix(w) from the logits."""
    sys.path.insert(0, str(ROOT / "examples"))
    from generate import pointer_shares

    model = tiny_model(pointer_window=5).eval()
    seq = torch.tensor([1, 2, 3, 1, 2, 4, 3, 4, 9])  # prompt of 5; 4 is outside its window, 3 and 4 then inside
    gate, share = pointer_shares(model, seq, 5, 4)
    with torch.no_grad():
        out = model(seq[None, :-1])
    words = seq[5:]
    log_mix = out.logits[0, 4:].gather(-1, words[:, None]).squeeze(-1)
    log_vocab = torch.log_softmax(out.vocab_logits[0, 4:], -1).gather(-1, words[:, None]).squeeze(-1)
    g = out.gate[0, 4:]
    want = 1 - g * (log_vocab - log_mix).exp()
    torch.testing.assert_close(gate, g)
    assert share[0] == 0 and share[3] == 0  # 4 before it entered the window; 9 never in it
    assert share[1] > 0.05 and share[2] > 0.05
    torch.testing.assert_close(share, want.clamp(min=0), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(share, 1 - g, atol=1e-3)  # not the pointer's total share


def test_generate_show_gate_prints_each_words_pointer_share(tmp_path, capsys):
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

    tok = build_word_level_tokenizer(["a b c a b c d", "e f a b"])
    model = tiny_model(vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    with torch.no_grad():  # q = 0: uniform attention, most mass on the window, so greedy picks window words
        model.pointer.sentinel.fill_(0.0)
        model.pointer.query.weight.zero_()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    generate_main()([str(tmp_path), "--prompt", "a b c a", "--max_new_tokens", "5", "--show_gate"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if "g=" in line]
    assert rows
    # the prompt starts a line: <eos> first
    seq = torch.tensor(
        [tok.eos_token_id, *tok("a b c a")["input_ids"], *tok.convert_tokens_to_ids([r[0] for r in rows])]
    )
    with torch.no_grad():
        out = model.eval()(seq[None, :-1])
    at, words = slice(4, None), seq[5:]
    p_mix = out.logits[0, at].gather(-1, words[:, None]).squeeze(-1).exp()
    p_vocab = torch.softmax(out.vocab_logits[0, at], -1).gather(-1, words[:, None]).squeeze(-1)
    want = (1 - out.gate[0, at] * p_vocab / p_mix).clamp(min=0)
    got = torch.tensor([float(r[1].removeprefix("from_pointer=")) for r in rows])
    torch.testing.assert_close(got, want, atol=6e-4, rtol=0)
    assert got.max() > 0.1
    torch.testing.assert_close(torch.tensor([float(r[2].removeprefix("g=")) for r in rows]), out.gate[0, at],
                               atol=6e-4, rtol=0)  # fmt: skip


def test_generate_stops_each_sample_at_its_first_eos_and_spaces_the_text(saved_model):
    """Shorter samples are padded with <eos>: neither their text nor --show_gate may go past the first <eos>; and
    the prompt and the continuation are joined by one space (the decoder starts every word with one)."""
    done = run_script("generate.py", saved_model, "--prompt", "a b ", "--do_sample", "--num_return_sequences", "5",
                      "--max_new_tokens", "6", "--show_gate")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    samples = []  # (text, gate rows)
    for line in done.stdout.splitlines():
        if "g=" in line:
            samples[-1][1].append(line.split()[0])
        else:
            samples.append((line, []))
    assert len(samples) == 5
    lengths = set()
    for text, words in samples:
        assert text.startswith("a b") and "  " not in text and "<eos>" not in text, text
        assert "<eos>" not in words[:-1], words  # nothing after the first <eos>
        assert text.split()[2:] == [w for w in words if w != "<eos>"]  # one gate per generated word
        lengths.add(len(words))
    assert len(lengths) > 1 and min(lengths) < 6  # some samples did end early, with padding after them


def test_docs_and_help_do_not_name_the_developers_shared_folder():
    """Users have no ../shared: the docs and the scripts' help name Hub datasets or "your copy of ptb.train.txt"."""
    files = [ROOT / "README.md", ROOT / "model_card.md", *sorted((ROOT / "examples").glob("*.py"))]
    assert [f.name for f in files if "../shared" in f.read_text()] == []


def damaged_copy(saved_model, tmp_path, edit) -> str:
    """A copy of the saved model whose config.json `edit` changed."""
    import json
    import shutil

    folder = tmp_path / "damaged"
    shutil.copytree(saved_model, folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


CONFIG_JSON_MISTAKES = {
    "misspelt key": (lambda c: c.update(hiden_size=c.pop("hidden_size")), "its weights do not fit its config.json"),
    "string for an int": (lambda c: c.update(hidden_size="16"), "Field 'hidden_size' expected int, got str"),
    "float for an int": (lambda c: c.update(hidden_size=16.5), "Field 'hidden_size' expected int, got float"),
    "string for a bool": (lambda c: c.update(use_pointer="yes"), "Field 'use_pointer' expected bool, got str"),
}


@pytest.mark.parametrize("script", ["generate.py", "evaluate.py", "train.py"])
@pytest.mark.parametrize("case", sorted(CONFIG_JSON_MISTAKES))
def test_a_damaged_saved_config_ends_in_one_error_line(script, case, saved_model, tmp_path):
    """A misspelt key or a value of the wrong type in a saved config.json: one `error:` line naming the problem (the
    misspelling's hint printed once above it), never a traceback."""
    edit, message = CONFIG_JSON_MISTAKES[case]
    folder = damaged_copy(saved_model, tmp_path, edit)
    text = tmp_path / "text.txt"
    text.write_text("a b c a b c d\ne f a b\n" * 20)
    args = {
        "generate.py": [folder, "--prompt", "a b"],
        "evaluate.py": [folder, "--test_file", text],
        "train.py": ["--model_name_or_path", folder, "--train_file", text, "--output_dir", tmp_path / "out"],
    }
    done = run_script(script, *args[script])
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len(errors) == 1 and f"{script}: error: cannot load the " in errors[0] and message in errors[0], errors
    if case == "misspelt key":
        assert done.stderr.count("did you mean 'hidden_size'?") == 1


@pytest.mark.parametrize(
    "model, message",
    [
        ('{"hidden_size": "16"}', "Field 'hidden_size' expected int, got str"),
        ('{"hidden_size": 16.5}', "Field 'hidden_size' expected int, got float"),
        ('{"use_pointer": "yes"}', "Field 'use_pointer' expected bool, got str"),
        ('{"vocab_size": 50}', "vocab_size come from the tokenizer"),
    ],
)
def test_a_wrong_model_entry_in_a_train_config_ends_in_one_error_line(model, message, tmp_path):
    (tmp_path / "cfg.json").write_text(f'{{"model": {model}}}')
    text = tmp_path / "text.txt"
    text.write_text("a b c a b c d\ne f a b\n" * 20)
    done = run_script("train.py", "--config", tmp_path / "cfg.json", "--train_file", text, "--output_dir",
                      tmp_path / "out")  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("train.py: error: --config model: ")
    assert message in done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "case, args, message",
    [
        (
            "missing test file",
            ["--test_file", "no_such_ptb.test.txt"],
            "--test_file no_such_ptb.test.txt: no such file",
        ),
        ("negative length", ["--max_new_tokens", "-1"], "--max_new_tokens must be a positive integer, got -1"),
        ("no samples", ["--num_samples", "0"], "--num_samples must be a positive integer, got 0"),
        ("damaged folder", [], "No such file or directory: "),
        ("binary test file", ["--test_file", "binary.bin"], "--test_file binary.bin: not UTF-8 text (byte 3: "),
        ("empty test file", ["--test_file", "empty.txt"], "--test_file empty.txt: is empty"),
        ("blank test file", ["--test_file", "blank.txt"], "--test_file blank.txt: holds only blank lines, no text"),
        ("a folder as test file", ["--test_file", "."], "--test_file .: is a folder, not a text file"),
    ],
)
def test_try_pretrained_bad_input_is_one_error_line_before_any_sample(case, args, message, tmp_path):
    import shutil

    folder = ROOT / "pretrained" / "ptb-lstm-2x200"
    if case == "damaged folder":  # a shard its weights index names is missing
        folder = shutil.copytree(folder, tmp_path / "damaged")
        (folder / "model-00002-of-00002.safetensors").unlink()
    (tmp_path / "binary.bin").write_bytes(b"abc\xff\xfe\x00\x01" * 100)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n  \n\t\n")
    done = run_script("try_pretrained.py", "--model", folder, *args, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "sample:" not in done.stdout, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("try_pretrained.py: error: ") and message in last, last


def test_generate_docstring_example_continues_its_prompt_on_the_shipped_ptb_model(capsys):
    """The prompt starts a line (<eos> before it), as every training line does: from the zero state without one the
    PTB pointer model ends the line at once and prints the bare prompt."""
    folder = ROOT / "pretrained" / "ptb-pointer-sentinel-lstm-2x200"
    flags = ["--max_new_tokens", "10", "--do_sample", "--temperature", "0.8", "--top_k", "50", "--seed", "0"]
    generate_main()([str(folder), "--prompt", "the company said", *flags, "--num_return_sequences", "3"])
    samples = capsys.readouterr().out.strip().splitlines()
    assert len(samples) == 3 and all(s.startswith("the company said ") for s in samples), samples


@pytest.mark.parametrize("script", ["train.py", "generate.py", "evaluate.py", "export_pretrained.py"])
def test_help_examples_keep_their_line_continuations(script):
    """--help prints the module docstring: a shell example split over lines must keep its `\\` and line break (a
    non-raw docstring turns them into a run of spaces)."""
    import ast

    doc = ast.get_docstring(ast.parse((ROOT / "examples" / script).read_text()), clean=False)
    assert " \\\n" in doc and "         --" not in doc


# Runs a script as `python SCRIPT ARGS...` would, then names the heavy modules it imported, on the last line of stderr.
IMPORTS_OF = r"""
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    heavy = {"torch", "transformers", "accelerate", "datasets", "tokenizers"}
    print("heavy imports:", sorted(heavy & set(sys.modules)), file=sys.stderr)
"""
WT2 = str(ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200")
WT2_PLAIN = str(ROOT / "pretrained" / "wt2-lstm-2x200")  # use_pointer: false
COMMAND_LINE_MISTAKES = [  # (script, arguments, what its one error line says); "" is --help
    ("train.py", ["--help"], ""),
    ("train.py", ["--bogus_flag"], "unrecognized arguments: --bogus_flag"),
    ("train.py", ["--bptt", "0"], "--bptt must be a positive integer, got 0"),
    ("train.py", ["--optimizer", "adam"], "argument --optimizer: invalid choice"),
    ("train.py", ["--config", "bad.json"], "--config bad.json: bptt must be an integer, got 3.5"),
    ("train.py", ["--config", "model.json", "--clip", "-1"], "--clip must be >= 0"),  # a model entry, checked last
    ("train.py", ["--resume_from_checkpoint", "no_such_step"], "no such checkpoint folder"),
    ("evaluate.py", ["--help"], ""),
    ("evaluate.py", ["model", "--cache_window", "0"], "--cache_window must be >= 1, got 0"),
    ("evaluate.py", ["model", "--dynamic", "--dynamic_segment", "0"], "--dynamic_segment must be >= 1, got 0"),
    ("evaluate.py", ["model", "--dynamic_grid"], "--dynamic_grid needs --dynamic"),
    (
        "evaluate.py",
        ["model", "--dynamic", "--dynamic_grid_memo", "m.jsonl"],
        "--dynamic_grid_memo needs --dynamic_grid",
    ),
    ("evaluate.py", ["no_model"], "no such model folder"),
    ("evaluate.py", ["model", "--bptt", "0"], "--bptt must be >= 1, got 0"),
    ("evaluate.py", ["model", "--max_tokens", "-5"], "--max_tokens must be >= 1, got -5"),
    ("evaluate.py", ["model", "--max_tokens", "0"], "--max_tokens must be >= 1, got 0"),  # 0 meant the whole file
    ("evaluate.py", ["model", "--batch_size", "-1"], "--batch_size must be >= 1, got -1"),
    ("evaluate.py", ["model", "--num_threads", "0"], "--num_threads must be >= 1, got 0"),
    ("evaluate.py", ["."], ".: not a model folder (no config.json and no tokenizer.json or tokenizer_config.json;"),
    ("evaluate.py", [WT2, "--test_file", "."], "--test_file .: is a folder, not a text file"),
    ("evaluate.py", [WT2, "--test_file", "nope.txt"], "--test_file nope.txt: no such file"),
    ("evaluate.py", [WT2, "--test_file", "empty.txt"], "--test_file empty.txt: is empty"),
    ("evaluate.py", [WT2, "--compare", "."], "--compare .: not a model folder (no config.json;"),
    ("add_speller.py", ["--help"], ""),
    ("add_speller.py", [WT2, "out", "--held_out", "1"], "--held_out must be >= 2, got 1"),
    ("add_speller.py", [WT2, WT2], "output_dir must differ from model"),
    ("coining.py", ["--help"], ""),
    ("coining.py", [WT2, "--prompts_file", "nope.txt"], "--prompts_file nope.txt: no such file"),
    ("generate.py", ["--help"], ""),
    ("generate.py", ["model", "--top_p", "1.5"], "--top_p must be in (0, 1]"),
    ("generate.py", ["no_model"], "no such model folder"),
    ("generate.py", ["."], ".: not a model folder (no config.json and no tokenizer.json or tokenizer_config.json;"),
    ("generate.py", ["config_only"], "config_only: not a model folder (no tokenizer.json or tokenizer_config.json;"),
    ("generate.py", [WT2_PLAIN, "--show_gate"], f"--show_gate: the model in {WT2_PLAIN} has no pointer"),
    ("evaluate.py", [WT2, "--test_file", "nul.bin"], "--test_file nul.bin: not text (a NUL byte at byte 3); a binary"),
    ("evaluate.py", [WT2, "--test_file", "binary.bin"], "--test_file binary.bin: not UTF-8 text (byte 3: "),
    (
        "unseen_names.py",
        [WT2_PLAIN],
        f"{WT2_PLAIN}: its model has no pointer (use_pointer: false), so nothing can copy an unseen word back; give a "
        f"pointer model's folder; its pointer twin is {WT2}",
    ),
    ("app.py", ["--port", "-1"], "--port must be in [1, 65535], got -1"),
    ("app.py", ["--port", "99999"], "--port must be in [1, 65535], got 99999"),
    ("app.py", ["--port", "0"], "--port must be in [1, 65535], got 0"),  # Gradio would name port 0 in its URL
    ("app.py", ["--model", "no_model"], "--model no_model: no such model folder"),
    ("app.py", ["--concurrency", "0"], "--concurrency must be in [1, 64], got 0"),
    ("export_onnx.py", ["--help"], ""),
    ("export_onnx.py", ["model", "out", "--check_steps", "0"], "--check_steps must be >= 1"),
    ("export_onnx.py", ["/nonexistent", "out"], "/nonexistent: no such model folder"),
    ("export_onnx.py", [".", "out"], ".: not a model folder (no config.json)"),
    ("try_pretrained.py", ["--help"], ""),
    ("try_pretrained.py", ["--num_samples", "0"], "--num_samples must be a positive integer"),
    ("export_pretrained.py", ["--help"], ""),
    ("export_pretrained.py", ["no_run", "out", "--dataset", "wt2"], "not a model folder"),
    ("onnx_generate.py", ["--help"], ""),
    ("onnx_generate.py", ["out", "--prompt", "a", "--max_new_tokens", "0"], "--max_new_tokens must be >= 1, got 0"),
    ("onnx_generate.py", ["out", "--prompt", "a", "--temperature", "0"], "--temperature must be a number > 0, got 0.0"),
    ("onnx_generate.py", ["out", "--prompt", "a", "--top_k", "-1"], "--top_k must be >= 0 (0: off), got -1"),
    ("onnx_generate.py", ["out", "--prompt", "a", "--seed", "-1"], "--seed must be >= 0, got -1"),
    ("onnx_generate.py", ["out", "--prompt", "a", "--threads", "0"], "--threads must be >= 1, got 0"),
    ("onnx_generate.py", ["no_out", "--prompt", "a"], "no_out: no such folder"),
    ("lm_eval_wikitext.py", ["--help"], ""),
    ("quality_runs.py", ["--help"], ""),
    ("recipe_study.py", ["--help"], ""),
]


@pytest.mark.parametrize(
    "script, args, message",
    COMMAND_LINE_MISTAKES,
    ids=[f"{s} {' '.join(a).replace(WT2, 'WT2').replace(WT2_PLAIN, 'WT2_PLAIN')}" for s, a, _ in COMMAND_LINE_MISTAKES],
)
def test_scripts_check_their_command_line_before_importing_torch(script, args, message, tmp_path):
    """--help and a mistaken command line or config file answer at once (exit 0 with the help, exit 2 with one error
    line): torch, transformers and accelerate take 8-40 s to import, so a script imports them only once its command
    line has passed its checks."""
    (tmp_path / "bad.json").write_text('{"bptt": 3.5, "model": {"hidden_size": 8}}')
    (tmp_path / "model.json").write_text('{"model": {"hidden_size": 8}}')
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "nul.bin").write_bytes(b"abc" + bytes(100))  # NUL is valid UTF-8: only the NUL check refuses it
    (tmp_path / "binary.bin").write_bytes(b"abc\xff\xfe" * 100)
    (tmp_path / "config_only").mkdir()
    (tmp_path / "config_only" / "config.json").write_text("{}")
    cmd = [sys.executable, "-c", IMPORTS_OF, str(ROOT / "examples" / script), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    *errors, heavy = done.stderr.strip().splitlines()
    assert heavy == "heavy imports: []", done.stderr[-3000:]
    if message:
        assert_one_error_line(Done(done.returncode, "\n".join(errors)), message)
    else:
        assert done.returncode == 0 and done.stdout.startswith("usage: ") and not errors, done.stderr[-3000:]


def test_train_names_the_tokenizers_text_rules():
    """train.py names the text rules (--text_rules's choices) itself, so that --help and a mistaken flag need not
    import the tokenizer: the same rules as tokenization.TEXT_RULES."""
    from modeling_pointer_sentinel.tokenization import TEXT_RULES

    sys.path.insert(0, str(ROOT / "examples"))
    import train

    assert train.TEXT_RULES == TEXT_RULES


# ---- one line, not a traceback: what goes wrong after the command line's checks ----


def assert_only_an_error_line(done, script, *words):
    """stderr is exactly one line, `SCRIPT: error: ...` holding each of `words`, and the exit status 2: no traceback,
    and no progress bar above it (splitlines splits at a bar's carriage returns too)."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"{script}: error: ") and all(w in lines[0] for w in words), lines


class CodePayload:
    """Unpickled, it runs a shell command: what a hostile pytorch_model.bin holds."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import shlex

        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


@pytest.mark.parametrize("script", ["train.py", "generate.py"])
def test_a_pickled_model_that_holds_code_is_refused_in_one_line(script, saved_model, tmp_path):
    """A folder whose pytorch_model.bin pickles a call (config.json valid): torch.load's weights_only refuses it, none
    of it runs, and the script ends in one line saying so (load_errors had no UnpicklingError: a traceback), before
    train.py tokenises its data (and its progress bar)."""
    import shutil

    folder = shutil.copytree(saved_model, tmp_path / "pickled")
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "payload_ran"
    torch.save({"lm_head.bias": CodePayload(marker)}, folder / "pytorch_model.bin")
    torch.load(folder / "pytorch_model.bin", weights_only=False)  # the payload works: loaded unsafely, it runs
    assert marker.exists()
    marker.unlink()
    text = tmp_path / "text.txt"
    text.write_text("a b c a b c d\ne f a b\n" * 50_000)  # over 1 MiB: tokenising it would show a progress bar
    train = ["--model_name_or_path", folder, "--train_file", text, "--output_dir", tmp_path / "out"]
    args = {"train.py": [*train, "--data_cache_dir", tmp_path / "cache"], "generate.py": [folder, "--prompt", "a b"]}
    done = run_script(script, *args[script])
    assert_only_an_error_line(done, script, "pytorch_model.bin) holds Python objects that only running code rebuilds",
                              "it was not loaded")  # fmt: skip
    assert not marker.exists()


@pytest.mark.parametrize("case", ["too short for the streams", "cache grid without validation", "another vocabulary"])
def test_evaluate_checks_its_data_before_the_weights_load(case, saved_model, tmp_path):
    """Each check of the data and the flags that need it comes before the model's weights load (and their progress
    bar); a split too short for --batch_size streams names the flag that fixes it."""
    three = tmp_path / "three.txt"
    three.write_text("a b c\n")  # 4 tokens with its <eos>
    text = tmp_path / "text.txt"
    text.write_text("a b c a b c d\ne f a b\n" * 20)
    args, words = {
        "too short for the streams": ([three], ["4 tokens cannot fill 10 streams", "smaller --batch_size (at most 2"]),
        "cache grid without validation": ([text, "--cache_grid"], ["--cache_grid chooses the cache on the validation"]),
        "another vocabulary": ([text, "--compare", ROOT / "pretrained" / "ptb-lstm-2x200"], ["the same vocabulary"]),
    }[case]
    done = run_script("evaluate.py", saved_model, "--data_cache_dir", tmp_path / "cache", "--test_file", *args)
    assert_only_an_error_line(done, "evaluate.py", *words)


def test_generate_checks_the_prompt_before_the_weights_load():
    """A prompt the text rules drop whole (PTB's punctuation) is found by the tokenizer alone: one line, no progress
    bar of the weights above it."""
    done = run_script("generate.py", ROOT / "pretrained" / "ptb-pointer-sentinel-lstm-2x200", "--prompt", "...")
    assert_only_an_error_line(done, "generate.py", "--prompt has no words to continue")


def test_generate_ends_a_sample_at_its_eos_on_a_shipped_folder():
    """A shipped folder's generation config has no <eos> (its pipeline writes past line ends), but a generate.py
    sample ends at its first <eos>: generation stops there, not after --max_new_tokens (10**6 here)."""
    folder = ROOT / "pretrained" / "ptb-pointer-sentinel-lstm-2x200"
    cmd = [sys.executable, str(ROOT / "examples" / "generate.py"), str(folder), "--prompt", "the company said",
           "--do_sample", "--max_new_tokens", str(10**6)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=script_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("the company said ") and done.stdout.count("\n") == 1, done.stdout[-300:]


def test_generate_refuses_a_beam_search_too_large_for_memory_in_one_line(saved_model):
    """Beam search holds (beams, max length) ids from its start: the model's ValueError for 10**12 new tokens ends
    the script in one `error:` line, not a traceback."""
    done = run_script("generate.py", saved_model, "--prompt", "a b", "--num_beams", "2", "--max_new_tokens", 10**12)
    assert_one_error_line(done, "max_new_tokens: beam search keeps 2 x")


@pytest.fixture(scope="module")
def endless_model(tmp_path_factory):
    """A tiny saved plain LSTM that never writes <eos>: a sample runs to --max_new_tokens."""
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

    d = tmp_path_factory.mktemp("endless")
    tok = build_word_level_tokenizer(["a b c a b c d", "e f a b"])
    eos = tok.eos_token_id
    model = tiny_model(vocab_size=len(tok), eos_token_id=eos, pad_token_id=eos, bos_token_id=eos, use_pointer=False)
    with torch.no_grad():
        model.lm_head.bias[eos] = -1e4
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def read_until(proc, stream, enough, timeout=300) -> bytes:
    """What the running process writes to `stream` until `enough(what so far)`, the stream closes or `timeout` s."""
    got, deadline = b"", time.monotonic() + timeout
    while not enough(got) and time.monotonic() < deadline:
        if select.select([stream], [], [], 1)[0]:
            if not (chunk := os.read(stream.fileno(), 4096)):
                break
            got += chunk
    return got


@contextlib.contextmanager
def started(script: str, *args):
    """The script running as `python SCRIPT ARGS...` (its own process: a signal reaches it, not a shell), killed at
    the end if it still runs."""
    cmd = [sys.executable, str(ROOT / "examples" / script), *map(str, args)]
    # The script as a terminal starts it: SIGINT's default action, which exec gives a child for a handled signal.
    # Tests started in the background by a shell without job control (`pytest &`) have SIGINT ignored, and an
    # ignored signal stays ignored in a child, so Python would never turn Ctrl+C into KeyboardInterrupt there.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=script_env())
    finally:
        signal.signal(signal.SIGINT, before)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def ctrl_c(proc, script: str, *, out: bytes = b"", err: bytes = b"") -> tuple[str, str]:
    """Ctrl+C (SIGINT) to the script's process: it ends in one line, `SCRIPT: stopped by Ctrl+C`, exit status 130, no
    traceback. Returns (stdout, stderr), with what was read of them before."""
    proc.send_signal(signal.SIGINT)
    more_out, more_err = proc.communicate(timeout=120)
    stdout, stderr = (out + more_out).decode(), (err + more_err).decode()
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == f"{script}: stopped by Ctrl+C", stderr[-3000:]
    return stdout, stderr


def test_generate_streams_a_long_request_and_ctrl_c_stops_it_in_one_line(endless_model):
    """--max_new_tokens 10**9: the words appear as they come (the process still running), the request is told how to
    stop, and Ctrl+C ends the line written so far and the script in one line on stderr."""
    with started("generate.py", endless_model, "--prompt", "a b", "--max_new_tokens", 10**9, "--do_sample") as proc:
        out = read_until(proc, proc.stdout, lambda got: len(got.split()) >= 12)
        assert len(out.split()) >= 12 and proc.poll() is None, (out, proc.poll())  # words before the end
        stdout, stderr = ctrl_c(proc, "generate.py", out=out)
    assert stdout.startswith("a b ") and stdout.endswith("\n") and stdout.count("\n") == 1, stdout[-300:]
    assert "generating up to 1,000,000,000 new tokens; Ctrl+C stops it" in stderr


def test_try_pretrained_shows_a_long_requests_progress_and_ctrl_c_stops_it_in_one_line():
    """A shipped folder samples to --max_new_tokens (its generation config has no <eos>): 10**9 tokens show a
    progress bar, the request is told how to stop, and Ctrl+C ends the script in one line on stderr."""
    folder = ROOT / "pretrained" / "ptb-lstm-2x200"
    with started("try_pretrained.py", "--model", folder, "--max_new_tokens", 10**9) as proc:
        err = read_until(proc, proc.stderr, lambda got: got.count(b"generating: ") >= 2)  # drawn, then updated
        assert b"generating: " in err and proc.poll() is None, (err[-2000:], proc.poll())
        stdout, stderr = ctrl_c(proc, "try_pretrained.py", err=err)
    assert "Ctrl+C stops it" in stderr and "sample:" not in stdout


def test_a_pickled_model_on_a_torch_with_an_unsafe_unpickler_is_refused_in_one_line(saved_model, tmp_path):
    """torch below 2.10 (faked in the script's own process): a folder whose weights are a pickle alone is not read,
    and generate.py says which CVE and which torch to install; the same folder loads on this torch."""
    import shutil

    folder = shutil.copytree(saved_model, tmp_path / "pickled")
    state = __import__("safetensors.torch", fromlist=["load_file"]).load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    fake = ("import runpy, sys, torch; torch.__version__ = '2.9.1+cpu'; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")  # fmt: skip
    args = [str(ROOT / "examples" / "generate.py"), str(folder), "--prompt", "a b", "--max_new_tokens", "2"]
    done = subprocess.run(
        [sys.executable, "-c", fake, *args], capture_output=True, text=True, cwd=ROOT, env=script_env()
    )
    assert_only_an_error_line(done, "generate.py", "CVE-2026-24747", "torch>=2.10", "pytorch_model.bin")
    assert run_script("generate.py", folder, "--prompt", "a b", "--max_new_tokens", "2").returncode == 0
