"""The shipped models in pretrained/ (one Hub-style folder each) and the script that makes them.

For every folder: (i) it loads where this package cannot be imported (remote code only, fresh interpreter, cwd
outside the checkout) through AutoModelForCausalLM / AutoTokenizer / pipeline; (ii) a client's perplexity on the
recorded fixed slice (the test file's text through the folder's own tokenizer) equals the recorded value; (iii) the
card's front matter parses and its model-index figures are eval_results.json's. The same checks run on a tiny model
trained and exported here, so they are exercised even when pretrained/ holds nothing.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SHARED_DATA

PRETRAINED = ROOT / "pretrained"
FOLDERS = sorted(d for d in PRETRAINED.iterdir() if (d / "config.json").is_file()) if PRETRAINED.is_dir() else []
FILES = {"config.json", "tokenizer.json", "tokenizer_config.json", "README.md",
         "eval_results.json", "configuration_pointer_sentinel.py", "modeling_pointer_sentinel.py",
         "generation_pointer_sentinel.py", "tokenization_pointer_sentinel.py",
         "pipeline_pointer_sentinel.py"}  # fmt: skip

CLIENT = """
import json, lzma, math, sys

class Blocked:  # this package must not serve: only the folder's own code may
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "modeling_pointer_sentinel":
            raise ImportError("blocked: " + name)

sys.meta_path.insert(0, Blocked())
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

folder, text_file, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
pipe = pipeline("text-generation", model=folder, trust_remote_code=True)
result = {"class": type(model).__module__ + "." + type(model).__name__, "dtype": str(model.dtype),
          "line_rule": tok("a\\nb")["input_ids"][1] == tok.eos_token_id,
          "sample": pipe("the", max_new_tokens=5, do_sample=False)[0]["generated_text"],
          "suppressed": model.generation_config.suppress_tokens, "unk": tok.convert_tokens_to_ids("<unk>"),
          "text_rules": tok.init_kwargs.get("text_rules")}
# the folder's generation module: each greedy step's scores are forward's mixture (where no processor masked them)
prompt = tok("the company said", return_tensors="pt").input_ids
out = model.generate(prompt, max_new_tokens=8, do_sample=False, output_scores=True, return_dict_in_generate=True)
with torch.no_grad():
    forward = [model(out.sequences[:, : prompt.shape[1] + k]).logits[:, -1] for k in range(len(out.scores))]
# (a plain LSTM's generate scores only the vocabulary: of the placeholders it cannot copy, forward gives mass only to
# the next unused slot, V+0 here, a new word's column, and generate never writes a new word)
gaps = [(s - f[:, : s.shape[-1]])[s.isfinite()].abs().max().item() for s, f in zip(out.scores, forward)]
result["decode_gap"] = max(gaps)
lowest = torch.finfo(forward[0].dtype).min  # `logits` hold no -inf: an impossible column holds this
result["uncopyable"] = all(s.shape[-1] == f.shape[-1] or (bool((f[:, s.shape[-1] + 1 :] == lowest).all())
                               and bool((f[:, s.shape[-1]] > lowest).all())) for s, f in zip(out.scores, forward))
if text_file:
    with (lzma.open if text_file.endswith(".xz") else open)(text_file, "rt", newline="") as f:
        ids = tok(f.read(), return_tensors="pt").input_ids[:, : n + 1]  # the file's text, as a client holds it
    with torch.no_grad():
        out = model(ids[:, :-1], shift_labels=ids[:, 1:], logits_to_keep=1)
    result["fixed_slice_ppl"] = math.exp(out.loss.item())
    result["fixed_slice_targets"] = ids.shape[1] - 1
print(json.dumps(result))
"""


def weight_files(folder: Path) -> list[Path]:
    """model.safetensors, or the shards its index names (a folder with a speller: the word model's file, then the
    speller's)."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return [folder / "model.safetensors"]
    return [folder / f for f in sorted(set(json.loads(index.read_text())["weight_map"].values()))]


def measured_test_file(record: dict) -> Path | None:
    """The test split a folder was measured on: bundled for WikiText-2, the shared copy for PTB (None if absent)."""
    from modeling_pointer_sentinel.training import BUNDLED

    if record["dataset"] == "wt2":
        return BUNDLED / "wiki.test.tokens.xz"
    path = SHARED_DATA / "ptb" / record["test_file"]
    return path if path.is_file() else None


def check_loads_without_package(folder: Path, cwd: Path, text_file: Path | None) -> dict:
    """(i): a fresh interpreter where this package cannot be imported loads the folder through the Auto classes and
    pipeline, and (for (ii)) scores the recorded slice of text_file. Returns what the client measured."""
    record = json.loads((folder / "eval_results.json").read_text())
    assert FILES <= {p.name for p in folder.iterdir()}, sorted(FILES - {p.name for p in folder.iterdir()})
    assert all(f.is_file() for f in weight_files(folder)), weight_files(folder)
    config = json.loads((folder / "config.json").read_text())
    assert set(config["auto_map"]) >= {"AutoConfig", "AutoModelForCausalLM"}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    n = str(record["fixed_slice"]["targets"])
    done = subprocess.run([sys.executable, "-c", CLIENT, str(folder.resolve()), str(text_file or ""), n], cwd=cwd,
                          env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "custom code" not in done.stdout + done.stderr  # no prompt for trust_remote_code on the documented path
    client = json.loads(done.stdout.strip().splitlines()[-1])
    assert client["class"].startswith("transformers_modules.") and client["class"].endswith("ForCausalLM"), client
    assert client["dtype"] == f"torch.{record['dtype']}" and client["line_rule"], client
    assert client["sample"].startswith("the ") and len(client["sample"].split()) > 1, client
    # raw text is read the corpus's way, and generated text shows no <unk> unless asked
    assert client["text_rules"] == {"ptb": "ptb", "wt2": "wikitext"}[record["dataset"]], client
    assert client["suppressed"] == [client["unk"]], client
    assert client["decode_gap"] < 1e-4, client  # the shipped decode step scores as the shipped forward does
    assert client["uncopyable"], client
    return client


def check_fixed_slice(folder: Path, client: dict):
    """(ii): the client's perplexity on the fixed slice equals the one recorded at export."""
    recorded = json.loads((folder / "eval_results.json").read_text())["fixed_slice"]
    assert client["fixed_slice_targets"] == recorded["targets"]
    assert client["fixed_slice_ppl"] == pytest.approx(recorded["ppl"], rel=1e-5)


def check_card(folder: Path):
    """(iii): README.md's front matter parses (huggingface_hub's own reader) and its model-index holds the measured
    test and validation perplexities of eval_results.json; the text shows them and how to load the folder."""
    from huggingface_hub import ModelCard

    record = json.loads((folder / "eval_results.json").read_text())
    card = ModelCard.load(folder / "README.md")
    data = card.data
    assert data.library_name == "transformers" and data.license and "pointer-sentinel" in data.tags
    assert data.model_name == folder.name
    results = {r.dataset_split: r for r in data.eval_results}
    assert set(results) == {"test", "validation"}
    for split, r in results.items():
        assert (r.task_type, r.metric_type) == ("text-generation", "perplexity")
        assert r.metric_value == round(record[split]["ppl"], 2), split
        assert f"| {split} | {record[split]['targets']:,} | {record[split]['ppl']:.2f} |" in card.text
    assert f"{record['fixed_slice']['ppl']:.4f}" in card.text
    assert "trust_remote_code=True" in card.text and "@inproceedings{merity2017pointer" in card.text
    assert f"Weights ship as {record['dtype']}" in card.text
    assert "/shared/" not in card.text and "/shared/" not in json.dumps(record)  # no paths of this machine's data
    pointer = json.loads((folder / "config.json").read_text()).get("use_pointer", True)
    assert ("mixed with a pointer" in card.text) == pointer and ("without the pointer" in card.text) != pointer
    clock = record["training"]["run"].get("clock")
    assert ("the training process's CPU time" in card.text) == (clock == "cpu")
    if json.loads((folder / "config.json").read_text()).get("speller_size"):  # the speller's own figures
        speller = record["speller"]
        assert "## Unseen words: the speller" in card.text and speller["command"] in card.text
        assert f"{speller['chosen']['valid_bits']:.3f} bits" in card.text
        assert f"{speller['test']['bits_per_byte']:.4f} bits per UTF-8 byte" in card.text
        assert "becomes a placeholder" not in card.text


def test_card_says_what_the_model_is_and_what_its_minutes_count():
    """export_pretrained's card: a plain model is not described as mixing in a pointer, and training minutes on the
    CPU clock say so (a run's --clock cpu counts its process's CPU time, not the wall clock)."""
    sys.path.insert(0, str(ROOT / "examples"))
    from export_pretrained import model_card

    from modeling_pointer_sentinel import PointerSentinelConfig

    folder = ROOT / "pretrained" / "ptb-pointer-sentinel-lstm-2x200"
    record = json.loads((folder / "eval_results.json").read_text())
    stages = {k: record["training"].pop(k) for k in ("fine_tune", "fine_tune_run")}  # the base run's line alone
    for use_pointer, clock in ((True, "cpu"), (False, "wall"), (False, None)):
        config = PointerSentinelConfig.from_pretrained(folder, use_pointer=use_pointer, oov_pointer=False,
                                                       speller_size=0)  # fmt: skip
        run = {k: v for k, v in record["training"]["run"].items() if k != "clock"}
        record["training"]["run"] = run | ({"clock": clock} if clock else {})
        text = model_card(record, config, "bsd-3-clause")
        assert ("mixed with a pointer" in text) == use_pointer and ("out.gate" in text) == use_pointer
        assert ("train minutes (the training process's CPU time)" in text) == (clock == "cpu")
        assert ("train minutes (wall clock)" in text) == (clock == "wall")
        assert ("cannot copy" in text) == (not use_pointer) and "were fine-tuned to copy" not in text
    tuned = PointerSentinelConfig.from_pretrained(folder, oov_pointer=True, speller_size=0)
    tuned = model_card(record, tuned, "bsd-3-clause")
    assert "were fine-tuned to copy placeholders" in tuned and "so they rarely do" not in tuned
    for use_pointer in (True, False):  # with a speller: a repeat is copied, or (no pointer) spelled again
        spelled = model_card(record, PointerSentinelConfig.from_pretrained(folder, use_pointer=use_pointer),
                             "bsd-3-clause")  # fmt: skip
        assert ("the pointer copies a spelled word" in spelled) == use_pointer
        assert ("every occurrence is spelled anew" in spelled) != use_pointer
    record["training"] |= stages  # the folder's own record: each stage named, the last stage's run on its own clock
    staged = model_card(record, PointerSentinelConfig.from_pretrained(folder), "bsd-3-clause")
    assert staged.count("Then fine-tuned, in order: ") == 1 and staged.count("`python examples/train.py --config") == 4


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_shipped_model_loads_without_the_package(folder, tmp_path):
    record = json.loads((folder / "eval_results.json").read_text())
    client = check_loads_without_package(folder, tmp_path, measured_test_file(record))
    if "fixed_slice_ppl" not in client:
        pytest.skip(f"{record['test_file']} is not beside this checkout: the fixed slice was not scored")
    check_fixed_slice(folder, client)


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_shipped_model_card_matches_its_measurements(folder):
    check_card(folder)
    size = sum(p.stat().st_size for p in folder.iterdir())
    assert size < 60e6, f"{folder.name} is {size / 1e6:.0f} MB"
    for weights in weight_files(folder):
        assert not weights.read_bytes()[:40].startswith(b"version https://git-lfs")


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_the_demo_continues_its_prompt(folder, tmp_path):
    """The demo shows samples that go past the prompt (each starts a line, as in training); the README's default
    folder scores its bundled test split with no flag, as its card measured it (the others a short file: CI's time)."""
    demo = [sys.executable, str(ROOT / "examples" / "try_pretrained.py"), "--model", str(folder), "--max_new_tokens",
            "5", "--prompt", "the company said"]  # fmt: skip
    sys.path.insert(0, str(ROOT / "examples"))
    from try_pretrained import parse_args

    default = Path(parse_args([]).model).resolve() == folder.resolve()
    if not default:
        (tmp_path / "short.txt").write_text("the company said it would sell the unit\nthe shares rose\n" * 5)
        demo += ["--test_file", str(tmp_path / "short.txt")]
    done = subprocess.run(demo, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    samples = [line.removeprefix("sample: ") for line in done.stdout.splitlines() if line.startswith("sample: ")]
    assert len(samples) == 2 and all(s.startswith("the company said ") for s in samples), samples
    record = json.loads((folder / "eval_results.json").read_text())
    if default:  # bundled: scored with no flag, as the card measured it
        assert record["dataset"] == "wt2"
        assert f"test perplexity {record['test']['ppl']:.2f} over {record['test']['targets']:,} targets" in done.stdout


def test_the_readme_demo_default_is_scored_without_flags():
    """The README's first command passes no flag: its default model's test split must be bundled (WikiText-2)."""
    sys.path.insert(0, str(ROOT / "examples"))
    from try_pretrained import parse_args

    record = json.loads((Path(parse_args([]).model) / "eval_results.json").read_text())
    assert record["dataset"] == "wt2", record["model"]


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_shipped_code_is_the_package_code(folder):
    """Remote code and the installed package must run the same equations, or the card's figures hold for one loading
    path only. After a change to either file, copy it into each folder and re-run these tests (the fixed slice then
    checks the figures still hold)."""
    for name in (
        "modeling_pointer_sentinel.py",
        "configuration_pointer_sentinel.py",
        "generation_pointer_sentinel.py",
        "tokenization_pointer_sentinel.py",
        "pipeline_pointer_sentinel.py",
    ):
        shipped, package = folder / name, ROOT / "modeling_pointer_sentinel" / name
        assert shipped.read_text() == package.read_text(), f"{shipped} differs from {package}: copy it over"


def make_old_tokenizer(folder: Path):
    """Turn a saved tokenizer into one saved before the line-break rule (the state of runs trained before it)."""
    path = folder / "tokenizer.json"
    tk = json.loads(path.read_text())
    tk["normalizer"] = None
    tk["decoder"] = {"type": "Sequence", "decoders": [tk["decoder"]["decoders"][0], tk["decoder"]["decoders"][-1]]}
    path.write_text(json.dumps(tk))


def test_export_a_trained_run_end_to_end(tmp_path):
    """Train a tiny model (its tokenizer made pre-rule, as runs trained before the rule have), export it, and apply
    the checks the shipped folders get; examples/evaluate.py on the folder reproduces the recorded test figure."""
    import random

    from transformers import AutoTokenizer

    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)] + ["the"]
    for split, n in (("train", 300), ("valid", 60), ("test", 60)):
        lines = (" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(n))
        (tmp_path / f"{split}.txt").write_text("\n".join(lines) + "\n")
    data = ["--validation_file", str(tmp_path / "valid.txt"), "--test_file", str(tmp_path / "test.txt")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = str(ROOT)  # the package of this checkout (deliberate_breaks runs a scratch copy)
    recipe = ROOT / "examples" / "configs" / "tiny_test.json"
    train = [sys.executable, str(ROOT / "examples" / "train.py"), "--train_file", str(tmp_path / "train.txt"), *data,
             "--config", str(recipe), "--max_train_steps", "5", "--output_dir", str(tmp_path / "run")]  # fmt: skip
    done = subprocess.run(train, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    make_old_tokenizer(tmp_path / "run")
    old = AutoTokenizer.from_pretrained(tmp_path / "run")
    assert old("w1\nw2")["input_ids"] == old("w1 w2")["input_ids"]  # really the pre-rule form

    out = tmp_path / "pretrained" / "tiny-pointer"
    export = [sys.executable, str(ROOT / "examples" / "export_pretrained.py"), str(tmp_path / "run"), str(out),
              "--dataset", "ptb", *data, "--recipe", str(recipe), "--train_command", "python examples/train.py",
              ]  # fmt: skip
    offline = {**env, "HF_HUB_OFFLINE": "1"}  # as exports run here: how the run was loaded must not be saved
    done = subprocess.run(export, capture_output=True, text=True, cwd=tmp_path, env=offline)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads((out / "tokenizer_config.json").read_text())
    assert "local_files_only" not in saved and "is_local" not in saved and saved["oov_slots"] > 0
    record = json.loads((out / "eval_results.json").read_text())
    assert record["dtype"] == "float32" and record["test"]["batch_size"] == 10
    assert record["test_file"] == "test.txt" and str(tmp_path) not in json.dumps(record)
    generation = json.loads((out / "generation_config.json").read_text())  # only the length ends generation
    assert "eos_token_id" not in generation and "pad_token_id" not in generation

    client = check_loads_without_package(out, tmp_path, tmp_path / "test.txt")
    check_fixed_slice(out, client)
    check_card(out)
    evaluate = [sys.executable, str(ROOT / "examples" / "evaluate.py"), str(out), "--test_file",
                str(tmp_path / "test.txt"), "--output_json", str(tmp_path / "eval.json")]  # fmt: skip
    done = subprocess.run(evaluate, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "eval.json").read_text())["ppl"] == pytest.approx(record["test"]["ppl"], rel=1e-9)
    # the README's demo: samples through pipeline, then the card's figure from the same test file
    demo = [sys.executable, str(ROOT / "examples" / "try_pretrained.py"), "--model", str(out), "--max_new_tokens", "5"]
    done = subprocess.run([*demo, "--test_file", str(tmp_path / "test.txt")], capture_output=True, text=True,
                          cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("sample: ") == 2 and f"test perplexity {record['test']['ppl']:.2f} over" in done.stdout
    done = subprocess.run(demo, capture_output=True, text=True, cwd=tmp_path, env=env)  # PTB is not bundled
    assert (
        done.returncode == 0 and "not scored" in done.stdout and "test perplexity" not in done.stdout.splitlines()[-1]
    )

    done = subprocess.run(export, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 2 and "--overwrite" in done.stderr  # an existing folder is not replaced silently

    # a fine-tuned run: the card names each stage with its flags, the base run's line and the last stage's
    base = tmp_path / "base_results.json"
    base.write_text(json.dumps({"epochs": 40.0, "steps": 123, "stopped": "patience"}))
    stages = ["--fine_tune", str(recipe), str(recipe), "--base_results", str(base), "--overwrite"]
    done = subprocess.run([*export, *stages], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    train = json.loads((out / "eval_results.json").read_text())["training"]
    assert train["run"] == {"epochs": 40.0, "steps": 123, "stopped": "patience"}
    assert train["fine_tune_run"]["steps"] == 5 and len(train["fine_tune"]) == 2
    assert train["fine_tune"][1]["training"] == json.loads(recipe.read_text())
    card = (out / "README.md").read_text()
    assert "run: epochs 40, steps 123, stopped patience" in card and "Then fine-tuned, in order: `python" in card


def test_export_saves_the_tokenizer_without_how_it_was_loaded(tmp_path):
    """A remote-code tokenizer (a train.py run's, a shipped folder's) is saved with how it was loaded: `is_local`,
    and `local_files_only` under HF_HUB_OFFLINE. The exported folder's tokenizer_config.json holds neither."""
    sys.path.insert(0, str(ROOT / "examples"))
    from export_pretrained import save_tokenizer
    from transformers import AutoTokenizer

    import modeling_pointer_sentinel  # noqa: F401  registers the tokenizer class, as export_pretrained.py loads it

    tok = AutoTokenizer.from_pretrained(ROOT / "pretrained" / "ptb-lstm-2x200", local_files_only=True)
    tok.save_pretrained(tmp_path / "as_loaded")
    assert json.loads((tmp_path / "as_loaded" / "tokenizer_config.json").read_text())["local_files_only"] is True
    saved = save_tokenizer(tok, "ptb", tmp_path / "out")
    config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert "local_files_only" not in config and "is_local" not in config
    text = "the company zorblatt said"  # a spelling tokenizer stays one: the unseen word spelled alike
    assert config["spell_unseen"] is True and saved(text)["input_ids"] == tok(text)["input_ids"]


def test_export_takes_the_recipe_of_its_dataset_from_the_converged_results():
    """--recipe results/converged/results.json: the card's recipe is the run of the exported dataset."""
    sys.path.insert(0, str(ROOT / "examples"))
    from export_pretrained import load_recipe

    path = ROOT / "results" / "converged" / "results.json"
    run = json.loads(path.read_text())["runs"]["ptb"]
    recipe = load_recipe(str(path), "ptb", path.parent / "ptb_pointer")
    assert recipe["model"] == run["model"] and recipe["training"] == run["training"]
    assert recipe["command"] == run["command"] and recipe["revision"] == run["revision"]


def test_export_takes_the_recipe_of_the_run_it_exports(tmp_path):
    """quality_runs.py's run folders are named after their block: ptb_sgd_pointer takes the ptb_sgd recipe, and a
    folder named otherwise its dataset's; a results.json without either stops with one error line."""
    sys.path.insert(0, str(ROOT / "examples"))
    from export_pretrained import load_recipe

    runs = {"ptb": {"model": {}, "training": {"optimizer": "adamw"}, "command": "a"},
            "ptb_sgd": {"model": {}, "training": {"optimizer": "ntasgd"}, "command": "b"}}  # fmt: skip
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": runs}))
    optimizer = lambda run: load_recipe(str(path), "ptb", tmp_path / run)["training"]["optimizer"]  # noqa: E731
    assert optimizer("ptb_sgd_pointer") == "ntasgd" and optimizer("ptb_sgd_plain") == "ntasgd"
    assert optimizer("ptb_pointer") == "adamw" and optimizer("my_run") == "adamw"
    # a fine-tuned run, named freely, takes its base run's block (--base_results BLOCK_pointer.results.json)
    base = str(tmp_path / "ptb_sgd_pointer.results.json")
    assert load_recipe(str(path), "ptb", tmp_path / "my_copy_stage", base)["training"]["optimizer"] == "ntasgd"
    with pytest.raises(SystemExit):
        load_recipe(str(path), "wt2", tmp_path / "wt2_pointer")


def test_pretrained_is_not_installed_as_package_data():
    """pretrained/ is data of the repository: the wheel holds the package alone (explicit package list, no
    discovery), so the weights never land in site-packages."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["packages"] == ["modeling_pointer_sentinel"]
    assert all("pretrained" not in p for ps in setuptools.get("package-data", {}).values() for p in ps)
    assert not (ROOT / "pretrained" / "__init__.py").exists()
