"""The example scripts' command line: shared helpers in examples/cli.py, and invalid input ending in one line."""

import inspect
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, tiny_model

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


def run_script(name, *args, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    cmd = [sys.executable, str(ROOT / "examples" / name), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd or ROOT, env={**env, "HF_HUB_OFFLINE": "1"})


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
    assert_one_error_line(done, "does not exist")
    assert_one_error_line(run_script("generate.py", tmp_path / "no_model"), "no such model folder")


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
