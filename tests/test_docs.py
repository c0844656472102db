"""The docs' figures are the files' figures: every table of README.md, model_card.md and BENCHMARKS.md is read back
from the results file it names, and the docs stay within their line limits."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Signs, not goals: the README grew by the demo page, checkpoints that run no code and plain decode of unseen words.
DOCS = {"README.md": 300, "model_card.md": 320, "BENCHMARKS.md": 300}
RUNS = {"ptb-pointer-sentinel-lstm-2x200": "ptb_sgd_pointer", "ptb-lstm-2x200": "ptb_sgd_plain",
        "wt2-pointer-sentinel-lstm-2x200": "wt2_sgd_pointer", "wt2-lstm-2x200": "wt2_sgd_plain"}  # fmt: skip


def read(name: str) -> str:
    return (ROOT / name).read_text()


def rows(text: str, first_cell: str) -> list[list[str]]:
    """The cells of every table row whose first cell is `first_cell`."""
    found = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            found.append(cells)
    return found


def shipped(folder: str) -> dict:
    """The figures of a shipped folder, formatted as the docs write them."""
    record = json.loads((ROOT / "pretrained" / folder / "eval_results.json").read_text())
    # batch 1, each in its own file: the cache at its grid's best on the folder's own validation split (inside the
    # grid), and dynamic evaluation with the cache on top at the settings the converged run chose on validation
    chosen_path = ROOT / "results" / "converged" / f"{RUNS[folder]}.dynamic.json"
    chosen = json.loads(chosen_path.read_text())
    cache = json.loads((ROOT / "results" / "batch1" / f"{folder}.cache.json").read_text())
    dynamic_path = ROOT / "results" / "batch1" / f"{folder}.dynamic.json"
    settings = ("window", "theta", "lam", "lr", "segment_length")
    grid = cache["cache_grid"]
    assert cache["cache_grid_best_on_validation"] == min(grid, key=lambda point: point["ppl"])
    assert set(cache["cache_grid_bracket"].values()) == {"inside"}
    # the docs say each folder's grid chose what its converged run had chosen
    pairs = [(cache["cache"], cache["cache_grid_best_on_validation"]), (cache["cache"], chosen["cache"])]
    if dynamic_path.exists():
        dynamic = json.loads(dynamic_path.read_text())
        assert cache["ppl"] == dynamic["ppl"] and cache["split"] == dynamic["split"] == "test"
        pairs += [(dynamic["cache"], chosen["dynamic_cache"]), (dynamic["dynamic"], chosen["dynamic"])]
    else:  # a plain folder not scored again: its converged run's own figures, said so where they are shown
        dynamic = chosen
        for doc in ("README.md", "model_card.md"):
            said = re.search(r"The plain folders' \(([^)]*)\) dynamic columns are their converged runs'",
                             " ".join(read(doc).split()))  # fmt: skip
            assert said and f"`{folder}`" in said.group(1), doc
    for mine, theirs in pairs:
        assert {k: v for k, v in mine.items() if k in settings} == {k: v for k, v in theirs.items() if k in settings}
    upp = json.loads((ROOT / "results" / "open_vocabulary" / f"upp_{folder}.json").read_text())
    assert upp["ppl"] == pytest.approx(record["test"]["ppl"], rel=1e-6)  # UPP beside the card's own perplexity
    f = lambda x: f"{x:.2f}"  # noqa: E731
    batch1 = [cache["ppl"], cache["ppl_with_cache"], dynamic["ppl_dynamic"], dynamic["ppl_dynamic_with_cache"]]
    return {"params": f"{record['params'] / 1e6:.2f}M", "valid": f(record["validation"]["ppl"]),
            "test": f(record["test"]["ppl"]), "unk": f"{record['unk_rate']['test']:.2%}",
            "batch1": [f(x) for x in batch1], "upp": f(upp["upp"]["ppl"]),
            "oov_types": f"{upp['upp']['oov_types']:,}"}  # fmt: skip


@pytest.mark.parametrize("name", DOCS)
def test_docs_keep_their_line_limits(name):
    assert len(read(name).splitlines()) <= DOCS[name], name


@pytest.mark.parametrize("folder", RUNS)
def test_readme_table_is_the_folders_and_the_runs_figures(folder):
    """folder, params, valid, test (eval_results.json, batch 10), test at batch 1, + cache, + dynamic, + both
    (the run's dynamic.json)."""
    s = shipped(folder)
    assert rows(read("README.md"), f"`{folder}`") == [[f"`{folder}`", s["params"], s["valid"], s["test"], *s["batch1"]]]


@pytest.mark.parametrize("folder", RUNS)
def test_model_card_tables_are_the_folders_and_the_runs_figures(folder):
    s = shipped(folder)
    card = read("model_card.md")
    assert [r for r in rows(card, f"`{folder}`") if len(r) == 10] == [
        [f"`{folder}`", s["params"], s["valid"], s["test"], s["unk"], *s["batch1"], s["upp"]]
    ]
    words = " ".join(card.split())
    assert f"{s['oov_types']} on {'PTB' if folder.startswith('ptb') else 'WikiText-2'} test" in words


@pytest.mark.parametrize("corpus", ["wt2", "ptb"])
def test_model_card_renamed_names_tables_are_the_benchmarks_files(corpus):
    """Each corpus's renamed-names table: per split (validation, where the recipe was chosen, and test) and folder,
    real and renamed names, all positions and in the window; the prose's counts of positions."""
    card, words = read("model_card.md"), " ".join(read("model_card.md").split())
    for split in ("validation", "test"):
        path = ROOT / "results" / "open_vocabulary" / f"renamed_names_{corpus}_{split}.json"
        for r in json.loads(path.read_text()):
            assert (r["dataset"], r["split"]) == (corpus, split)
            table = rows(card, f"`{r['model']}`")
            for kind in ("real", "renamed"):
                a, w = r[kind]["all"], r[kind]["in_window"]
                cells = [f"`{r['model']}`", split, kind, f"{a['top1']:.1%}", f"{a['mean_log_p']:.2f}",
                         f"{w['top1']:.1%}", f"{w['mean_log_p']:.2f}"]  # fmt: skip
                assert cells in table, (cells, table)
            assert f"{split}: {r['cases']:,} positions, {r['in_window']:,} in the window" in words
            if "pointer" in r["model"]:  # renamed names produced beyond the window: all positions less the window
                produced = round(r["renamed"]["all"]["top1"] * r["cases"])
                beyond = produced - round(r["renamed"]["in_window"]["top1"] * r["in_window"])
                assert f"{beyond} of {produced}" in words, (corpus, split, beyond, produced)
    spelled = ROOT / "results" / "open_vocabulary" / f"renamed_names_{corpus}_validation_spelled.json"
    for r in json.loads(spelled.read_text()) if spelled.is_file() else []:  # the shipped folder, names spelled
        for kind in ("real", "renamed"):
            a, w = r[kind]["all"], r[kind]["in_window"]
            cells = [f"`{r['model']}`", "validation, spelled", kind, f"{a['top1']:.1%}", f"{a['mean_log_p']:.2f}",
                     f"{w['top1']:.1%}", f"{w['mean_log_p']:.2f}"]  # fmt: skip
            assert cells in rows(card, f"`{r['model']}`"), cells
        assert f"`</w>` at {r['renamed']['in_window']['top1']:.1%} of the positions in the window" in words


def test_model_card_lm_eval_table_is_its_results_file():
    r = json.loads((ROOT / "results" / "open_vocabulary" / "lm_eval_wikitext_wt2.json").read_text())
    folder = f"`{r['model'].removeprefix('pretrained/')}`"
    per_token = f"{r['token_perplexity']:.2f} over {r['tokens_scored']:,} tokens"
    cells = [folder, str(r["articles"]), f"{r['words']:,}", f"{r['word_perplexity']:.2f}",
             f"{r['byte_perplexity']:.4f}", per_token]  # fmt: skip
    assert cells in rows(read("model_card.md"), folder)


def test_benchmarks_tables_are_their_results_files():
    """Each table of BENCHMARKS.md follows a `Source: FILE` line, and each of its rows is a row of that file."""
    text = read("BENCHMARKS.md")
    sources = re.findall(r"^Source: `([^`]+)`\n\n((?:\|.*\n)+)", text, re.M)
    assert len(sources) >= 5
    for path, table in sources:
        lines = set((ROOT / path).read_text().splitlines())
        missing = [row for row in table.splitlines() if row not in lines]
        assert missing == [], (path, missing)
    tables = re.findall(r"^\|.*\n\|---", text, re.M)
    assert len(tables) == len(sources)  # every table has its file


def test_readme_commands_are_the_ci_commands():
    """The README's test command is what .ci/run runs, verbatim; its first command sets up and runs the demo."""
    readme = read("README.md")
    ci = [line for line in read(".ci/run").splitlines() if line.startswith("python3.11 -m venv")]
    assert len(ci) == 1 and f"```bash\n{ci[0]}\n```" in readme
    assert "```bash\npython3.11 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 -e . && " \
           ".venv/bin/python examples/try_pretrained.py\n```" in readme  # fmt: skip


@pytest.mark.parametrize("name", [*DOCS, "CHANGELOG.md", "results/converged/README.md"])
def test_docs_hold_no_revision_hashes_or_developer_paths(name):
    text = read(name)
    assert "../shared" not in text and "/shared/" not in text
    hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"\d", h) and re.search(r"[a-f]", h)]
    assert hashes == [], hashes


def test_the_removed_run_folders_are_named_nowhere_as_inputs():
    """The exported runs' folders are gone: no test or example reads them, and the results README says how to
    re-train."""
    for run in RUNS.values():
        assert not (ROOT / "results" / "converged" / run).exists()
    assert "quality_runs.py --converge" in read("results/converged/README.md")
    assert "/onnx/" in read(".gitignore").splitlines()


@pytest.mark.parametrize("folder", RUNS)
def test_each_folders_card_is_the_export_template_of_its_record(folder):
    """pretrained/*/README.md is what examples/export_pretrained.py's template writes for the folder's
    eval_results.json: a change of the template reaches every card (regenerated, weights untouched)."""
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    from export_pretrained import model_card

    from modeling_pointer_sentinel import PointerSentinelConfig

    path = ROOT / "pretrained" / folder
    record = json.loads((path / "eval_results.json").read_text())
    config = PointerSentinelConfig.from_pretrained(path)
    assert (path / "README.md").read_text() == model_card(record, config, "bsd-3-clause")


def test_readme_kill_and_resume_is_its_transcript():
    """The README's 2-rank kill-and-resume block is lines of results/distributed/kill_resume_cpu.txt (what
    kill_resume.sh beside it printed), in the file's order: the launch, the kill, the resume that names its checkpoint,
    and the resumed run's final figures equal to the uninterrupted run's."""
    readme = read("README.md")
    after = readme[readme.index("`results/distributed/kill_resume_cpu.txt`") :]
    block = re.search(r"```\n(.*?)\n```", after, re.S).group(1).splitlines()
    transcript = read("results/distributed/kill_resume_cpu.txt").splitlines()
    lines = iter(transcript)
    assert all(line in lines for line in block), [line for line in block if line not in transcript]
    assert block[0].startswith('$ TWO="accelerate launch --multi_gpu --num_processes 2 ') and block[1].endswith(" &")
    kill = [line for line in block if line.startswith("$ kill -KILL ")]
    resumed = [line for line in block if line.startswith("resuming from ") and line.endswith("/step_100")]
    final = [line.split(" | train_minutes")[0] for line in block if line.startswith("validation_ppl ")]
    assert len(kill) == 1 and len(resumed) == 1 and len(final) == 2 and final[0] == final[1], block
    assert "all equal to the uninterrupted run's" in read("results/distributed/kill_resume_cpu.txt")


@pytest.mark.parametrize("corpus", ["wt2", "ptb"])
def test_readme_unseen_names_are_their_results_file(corpus):
    """The README's free-running counts are results/open_vocabulary/unseen_names_{wt2,ptb}.json: over its prompts'
    greedy and sampled continuations, how many bring an unseen word back and how many a real name."""
    (r,) = json.loads(read(f"results/open_vocabulary/unseen_names_{corpus}.json"))
    g, n = r["greedy_and_sampled"], len(r["prompts"])
    words = " ".join(read("README.md").split())
    assert (f"`{r['model']}`: {g['with_an_unseen_word']} of {g['continuations']} bring an unseen name back, "
            f"{g['with_a_real_name']} a real one") in words  # fmt: skip
    assert f"{n} prompts, greedy and {r['samples']} samples each (top-k 40, seed {r['seed']})" in words


def test_readme_first_generate_example_is_what_it_prints():
    """The README's first generate example decodes a copied unseen name with plain `tok.decode`, on the default
    WikiText-2 folder: run as written, it prints the comment beside it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    readme = read("README.md")
    block = readme[readme.index("**Load and generate**") :]
    block = re.search(r"```python\n(.*?)\n```", block, re.S).group(1)
    generate = next(ln for ln in block.splitlines() if ln.startswith("out = model.generate(**enc"))
    lines = block.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("tok.decode(out[0])"))
    code, shown = lines[at].split("  # ", 1)[0], lines[at + 1].removeprefix("# ")
    prompt = re.search(r'^enc = tok\((".*?"), return_tensors="pt"\)', block, re.M).group(1)
    folder = "pretrained/wt2-pointer-sentinel-lstm-2x200"
    assert f'folder = "{folder}"' in block
    model = AutoModelForCausalLM.from_pretrained(ROOT / folder, trust_remote_code=True, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(ROOT / folder, trust_remote_code=True)
    enc = tok(json.loads(prompt), return_tensors="pt")
    names = {"tok": tok, "model": model, "enc": enc}
    exec(generate.split("  # ")[0], names)  # noqa: S102 (the README's own lines)
    text = eval(code, names)  # noqa: S307
    assert repr(text) == shown
    unseen = tok.unseen_words(json.loads(prompt))
    assert unseen and any(w in text[len(json.loads(prompt)) :] for w in unseen)  # a copied unseen name
    assert not any(b in text for b in ("<oov-", "<unk>", "<0x", "</w>"))


def test_readme_int8_cost_is_the_onnx_benchmark_file():
    """The README's int8 cost is the WikiText-2 row of benchmarks/results_onnx_cpu.md (int8 / PyTorch test perplexity),
    and it points to BENCHMARKS.md, which shows that file's table."""
    row = rows(read("benchmarks/results_onnx_cpu.md"), "wt2-pointer-sentinel-lstm-2x200")[0]
    torch_ppl, _, int8_ppl = map(float, row[3].split(" / "))
    words = " ".join(read("README.md").split())
    cost = f"{int8_ppl / torch_ppl - 1:+.2%}"
    assert f"int8 costs {cost} test perplexity on the WikiText-2 model ([BENCHMARKS.md]" in words
    assert "Source: `benchmarks/results_onnx_cpu.md`" in read("BENCHMARKS.md")


def test_readme_repository_names_every_example_and_every_shipped_model():
    """The Repository section's `examples/` row names each script in examples/, and the count of shipped models is
    the count of pretrained/'s folders."""
    readme = read("README.md")
    row = next(line for line in readme.splitlines() if line.startswith("| `examples/` |"))
    scripts = sorted(f.name for f in (ROOT / "examples").glob("*.py"))
    assert [f for f in scripts if f"`{f}`" not in row] == []
    folders = [f for f in (ROOT / "pretrained").iterdir() if (f / "config.json").is_file()]
    count = {4: "four", 5: "five", 6: "six", 7: "seven"}[len(folders)]
    assert f"A clone holds the code, the {count} shipped models," in readme


def test_readme_open_vocabulary_states_the_spelling_limit():
    """The Open vocabulary paragraph's piece length is the tokenizer's, and every shipped folder spells."""
    from modeling_pointer_sentinel.tokenization_pointer_sentinel import MAX_SPELLED_BYTES

    folders = [f for f in (ROOT / "pretrained").iterdir() if (f / "config.json").is_file()]
    assert all(json.loads((f / "tokenizer_config.json").read_text()).get("spell_unseen") for f in folders)
    words = " ".join(read("README.md").split())
    assert f"(past {MAX_SPELLED_BYTES} bytes in pieces joined by `<+w>`, any length)" in words


def test_readme_onnx_prompt_starts_a_line():
    """The README advises starting a prompt with a line break; onnx_generate.py reads --prompt as given (no escapes),
    so its command passes a real one (bash's $'\\n...')."""
    commands = [line for line in read("README.md").splitlines() if line.startswith("python examples/onnx_generate.py")]
    assert commands and all("--prompt $'\\n" in c for c in commands), commands
