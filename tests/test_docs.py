"""The docs' figures are the files' figures: every table of README.md, model_card.md and BENCHMARKS.md is read back
from the results file it names, and the docs stay within their line limits."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Signs, not goals: the README grew by the demo page, checkpoints that run no code and plain decode of unseen words.
DOCS = {"README.md": 280, "model_card.md": 300, "BENCHMARKS.md": 200}
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
    dynamic = json.loads((ROOT / "results" / "converged" / f"{RUNS[folder]}.dynamic.json").read_text())
    upp = json.loads((ROOT / "results" / "open_vocabulary" / f"upp_{folder}.json").read_text())
    assert dynamic["dynamic"]["static_ppl_batch_1"] == dynamic["ppl"] and dynamic["split"] == "test"
    assert upp["ppl"] == pytest.approx(record["test"]["ppl"], rel=1e-6)  # UPP beside the card's own perplexity
    f = lambda x: f"{x:.2f}"  # noqa: E731
    return {"params": f"{record['params'] / 1e6:.2f}M", "valid": f(record["validation"]["ppl"]),
            "test": f(record["test"]["ppl"]), "unk": f"{record['unk_rate']['test']:.2%}",
            "batch1": [f(dynamic[k]) for k in ("ppl", "ppl_with_cache", "ppl_dynamic", "ppl_dynamic_with_cache")],
            "upp": f(upp["upp"]["ppl"]), "oov_types": f"{upp['upp']['oov_types']:,}"}  # fmt: skip


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


def test_model_card_renamed_names_table_is_the_benchmarks_file():
    results = json.loads((ROOT / "results" / "open_vocabulary" / "renamed_names_wt2.json").read_text())
    card = read("model_card.md")
    for r in results:
        table = rows(card, f"`{r['model']}`")
        for kind in ("real", "renamed"):
            a, w = r[kind]["all"], r[kind]["in_window"]
            cells = [f"`{r['model']}`", kind, f"{a['top1']:.1%}", f"{a['mean_log_p']:.2f}", f"{w['top1']:.1%}",
                     f"{w['mean_log_p']:.2f}"]  # fmt: skip
            assert cells in table, (cells, table)
        assert f"{r['cases']:,} positions, {r['in_window']:,} with the previous occurrence" in " ".join(card.split())
    # the prose's ratios: the fine-tuned folder's renamed/real top-1 rate and log p gap in the window
    tuned = next(r for r in results if r["model"].endswith("-oov-pointer"))
    real, renamed = tuned["real"]["in_window"], tuned["renamed"]["in_window"]
    words = " ".join(card.split())
    assert f"at {renamed['top1'] / real['top1']:.0%} of the real name's rate in the window" in words
    gap = renamed["mean_log_p"] - real["mean_log_p"]
    assert f"a mean log p {abs(gap):.2f} nats {'above' if gap >= 0 else 'below'}" in words
    # the same fine-tuning without the context query, and what the query changes
    (ablated,) = json.loads((ROOT / "results" / "open_vocabulary" / "renamed_names_wt2_no_context.json").read_text())
    a_real, a_renamed = ablated["real"]["in_window"], ablated["renamed"]["in_window"]
    assert (f"gives {a_renamed['top1']:.1%} and {a_renamed['mean_log_p']:.2f} in the window (renamed; real "
            f"{a_real['top1']:.1%}, {a_real['mean_log_p']:.2f})") in words  # fmt: skip
    points, nats = 100 * (renamed["top1"] - a_renamed["top1"]), a_renamed["mean_log_p"] - renamed["mean_log_p"]
    assert f"c_i buys {points:.1f} points of top-1 for {nats:.2f} nats of log p" in words


@pytest.mark.parametrize("name", ["lm_eval_wikitext_wt2.json", "lm_eval_wikitext_wt2_oov_pointer.json"])
def test_model_card_lm_eval_table_is_its_results_file(name):
    r = json.loads((ROOT / "results" / "open_vocabulary" / name).read_text())
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


def test_readme_unseen_names_are_their_results_file():
    """The README's open-vocabulary continuation and return rates are results/open_vocabulary/unseen_names_wt2.json:
    the fine-tuned folder's first sampled continuation of the prompt shown, and per decoding the mean share of samples
    with an unseen word back or the prompts (beam, greedy), for it and for the folder it was tuned from."""
    results = {r["model"]: r for r in json.loads(read("results/open_vocabulary/unseen_names_wt2.json"))}
    words = " ".join(read("README.md").split())
    tuned, base = results["wt2-pointer-sentinel-lstm-2x200-oov-pointer"], results["wt2-pointer-sentinel-lstm-2x200"]
    shown = next(p for p in tuned["prompts"] if p["prompt"].startswith("\nThe Quarrington River"))
    assert '`"' + shown["prompt"].replace("\n", "\\n") + '"`' in words
    assert f"continues `{shown['sample']['continuations'][0].replace(chr(10), chr(92) + 'n')}` in the first of one " \
        f"call's {tuned['samples']} samples (`num_return_sequences={tuned['samples']}`;" in words  # fmt: skip
    assert f"Sampled through its `pipeline` (top-k 40, seed {tuned['seed']})," in words
    assert shown["sample"]["unseen_back"][0], "the continuation shown brings an unseen word back"

    def rates(r):
        n = len(r["prompts"])
        found = [sum(p[k]["with_an_unseen_word"] > 0 for p in r["prompts"]) for k in ("beam", "greedy")]
        return found, n, sum(p["sample"]["with_an_unseen_word"] for p in r["prompts"]) / n

    (beam, greedy), n, sampled = rates(tuned)
    assert f"{sampled:.0%} of sampled, {beam} of {n} beam and {greedy} of {n} greedy continuations" in words
    (beam, greedy), n, sampled = rates(base)
    assert f"tuned from: {sampled:.0%}, {beam}, {greedy};" in words


def test_model_card_oov_pointer_row_is_its_files():
    """The fine-tuned folder's row: params, valid, test, <unk> rate (eval_results.json), the batch-1 columns (its
    dynamic file, at the settings of the folder it was tuned from) and UPP (its UPP file)."""
    folder = "wt2-pointer-sentinel-lstm-2x200-oov-pointer"
    record = json.loads((ROOT / "pretrained" / folder / "eval_results.json").read_text())
    upp = json.loads((ROOT / "results" / "open_vocabulary" / f"upp_{folder}.json").read_text())
    dyn = json.loads((ROOT / "results" / "open_vocabulary" / "wt2_oov_pointer.dynamic.json").read_text())
    parent = json.loads((ROOT / "results" / "converged" / "wt2_sgd_pointer.dynamic.json").read_text())
    assert upp["ppl"] == pytest.approx(record["test"]["ppl"], rel=1e-6)
    for key in ("cache", "dynamic", "dynamic_cache"):  # the parent's choices, not chosen again
        assert {k: dyn[key][k] for k in parent[key] if k in ("window", "theta", "lam", "lr", "segment_length")} == {
            k: parent[key][k] for k in parent[key] if k in ("window", "theta", "lam", "lr", "segment_length")
        }
    batch_1 = [f"{dyn[k]:.2f}" for k in ("ppl", "ppl_with_cache", "ppl_dynamic", "ppl_dynamic_with_cache")]
    cells = [f"`{folder}`", f"{record['params'] / 1e6:.2f}M", f"{record['validation']['ppl']:.2f}",
             f"{record['test']['ppl']:.2f}", f"{record['unk_rate']['test']:.2%}", *batch_1,
             f"{upp['upp']['ppl']:.2f}"]  # fmt: skip
    assert cells in rows(read("model_card.md"), f"`{folder}`")


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


def test_readme_open_vocabulary_states_the_shipped_slot_limit():
    """The Open vocabulary paragraph's placeholder range and limit are the shipped folders' `oov_slots`."""
    slots = {json.loads((f / "config.json").read_text())["oov_slots"] for f in (ROOT / "pretrained").iterdir()}
    assert len(slots) == 1
    n = slots.pop()
    words = " ".join(read("README.md").split())
    assert f"placeholder id V..V+{n - 1} (`config.oov_slots`, {n}; past {n} distinct ones in one text the rest " \
           "read as `<unk>`, with a warning)" in words  # fmt: skip


def test_readme_onnx_prompt_starts_a_line():
    """The README advises starting a prompt with a line break; onnx_generate.py reads --prompt as given (no escapes),
    so its command passes a real one (bash's $'\\n...')."""
    commands = [line for line in read("README.md").splitlines() if line.startswith("python examples/onnx_generate.py")]
    assert commands and all("--prompt $'\\n" in c for c in commands), commands
