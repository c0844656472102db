r"""Make a shippable model folder (laid out as a Hugging Face Hub model repository) from a trained run.

    python examples/export_pretrained.py RUN_DIR pretrained/ptb-pointer-sentinel-lstm-2x200 --dataset ptb \
        --validation_file ptb.valid.txt --test_file ptb.test.txt --recipe results/converged/results.json
    python examples/export_pretrained.py RUN_DIR pretrained/wt2-pointer-sentinel-lstm-2x200 --dataset wt2   # bundled

RUN_DIR is a folder written by examples/train.py (model, tokenizer, results.json). The script
- re-saves the tokenizer in the current form (line breaks read as <eos>, the dataset's text rules), checking that the
  ids of every split are the ones the run was evaluated on; generate() suppresses <unk> by default;
- saves the model as float32 safetensors with its code (config.json's auto_map, so `trust_remote_code=True` loads it
  where this package is not installed), and reports what loading it in bfloat16 or float16 costs;
- measures test and validation perplexity on the full splits exactly as examples/evaluate.py does (its defaults:
  batch 10, bptt 200, state carried), a fixed slice (the first 2,000 test targets, batch 1), and the test perplexity
  with bfloat16 and float16 weights, on the saved folder;
- writes eval_results.json (the figures and the commands that reproduce them) and README.md, the model card, from
  those measured figures.
Invalid input stops the script with one `error:` line on stderr and exit status 2.
"""

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py and evaluate.py beside this script
from cli import ArgumentParser, check_local_path, fail, load_saved_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXED_SLICE_TOKENS = 2000
# prompt / scored: the card's usage snippet and try_pretrained.py's default prompt, in the corpus's own tokenisation
DATASETS = {
    "ptb": dict(name="Penn Treebank (Mikolov et al.'s preprocessing)", hub="ptb_text_only", text_rules="ptb",
                files=("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"), bundled=False,
                prompt="the company said", scored="the company said it expects to report a loss"),
    "wt2": dict(name="WikiText-2", hub="wikitext", config="wikitext-2-v1", text_rules="wikitext",
                files=("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens"), bundled=True,
                prompt="The game was released in", scored="The game was released in Japan in 2011 ."),
}  # fmt: skip


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("run_dir", help="a folder written by examples/train.py (model, tokenizer, results.json)")
    a("out_dir", help="the folder to write, e.g. pretrained/ptb-pointer-sentinel-lstm-2x200")
    a("--dataset", choices=sorted(DATASETS), required=True, help="the data the run was trained on")
    a("--validation_file", help="ptb: your copy of ptb.valid.txt (wt2: the bundled split when not given)")
    a("--test_file", help="ptb: your copy of ptb.test.txt (wt2: the bundled split when not given)")
    a("--recipe", help="JSON with the training recipe: results/converged/results.json, or the --config file of the run")
    a("--train_command", help="the command that trained the run (default: the recipe's 'command')")
    a("--fine_tune", nargs="+", metavar="CONFIG", help="the train.py --config files of the fine-tuning "
      "stages that made RUN_DIR from the --recipe run, in order (examples/configs/wt2_copy_unseen.json)")  # fmt: skip
    a("--base_results", help="with --fine_tune: the --recipe run's results.json, or an eval_results.json exported "
      "from it, for the card's run line (RUN_DIR's results.json is then the last stage's)")  # fmt: skip
    a("--license", default="bsd-3-clause")
    a("--overwrite", action="store_true", help="replace an existing out_dir")
    args = p.parse_args(argv)
    if not (Path(args.run_dir) / "config.json").is_file():
        p.error(f"{args.run_dir}: not a model folder written by examples/train.py (no config.json)")
    if Path(args.out_dir).exists() and any(Path(args.out_dir).iterdir()) and not args.overwrite:
        p.error(f"{args.out_dir} exists and is not empty (pass --overwrite to replace it)")
    if not DATASETS[args.dataset]["bundled"] and not (args.validation_file and args.test_file):
        p.error(f"--dataset {args.dataset} is not bundled: give --validation_file and --test_file")
    for flag in ("validation_file", "test_file", "recipe", "base_results"):
        check_local_path(p, f"--{flag}", getattr(args, flag))
    for config in args.fine_tune or ():
        check_local_path(p, "--fine_tune", config)
    if args.base_results and not args.fine_tune:
        p.error("--base_results is the run before --fine_tune's stages: give --fine_tune too")
    return args


if __name__ == "__main__":  # a mistaken command line fails here, before the imports below (torch: 8-40 s)
    parse_args()

import torch  # noqa: E402
from evaluate import parse_args as evaluate_args  # noqa: E402
from evaluate import streams_for  # noqa: E402
from huggingface_hub import EvalResult, ModelCard, ModelCardData  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from modeling_pointer_sentinel.evaluation import collect_outputs  # noqa: E402
from modeling_pointer_sentinel.pipeline_pointer_sentinel import ship_pipeline  # noqa: E402
from modeling_pointer_sentinel.tokenization import add_text_rules, open_vocabulary  # noqa: E402
from modeling_pointer_sentinel.training import (  # noqa: E402
    encode_lines,
    load_text_splits,
    suppress_unk_in_generation,
    unk_rate,
    unk_token_id,
    word_count,
)


def display_path(path) -> str:
    """A path as the card and the recorded commands show it: relative to the checkout when inside it, else its name
    (the user's own data folders are not named)."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def git_revision() -> str | None:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def measure(model, ids: torch.Tensor, batch_size: int, bptt: int, max_tokens: int | None = None) -> dict:
    """Perplexity as examples/evaluate.py measures it (same streams, same collect_outputs)."""
    out = collect_outputs(model, streams_for(ids, batch_size, max_tokens), bptt)
    return {"ppl": out.perplexity(), "targets": out.targets.numel(), "batch_size": batch_size, "bptt": bptt}


def save_tokenizer(tok, text_rules: str, out_dir: Path):
    """The tokenizer in the current form (the text rules, the open vocabulary) saved in out_dir, and read back from
    it. transformers saves how a remote-code tokenizer was loaded with it (`is_local`, and `local_files_only` under
    HF_HUB_OFFLINE): a shipped folder's config says what the tokenizer is, so those keys are dropped, and a user
    online is not told to stay offline."""
    if not getattr(tok, "spell_unseen", False):  # a spelling tokenizer's vocabulary is open already
        tok = open_vocabulary(add_text_rules(tok, text_rules))
    tok.save_pretrained(out_dir)
    drop_loading_keys(out_dir)
    return AutoTokenizer.from_pretrained(out_dir)


def drop_loading_keys(out_dir: Path):
    path, loading = out_dir / "tokenizer_config.json", {"local_files_only", "is_local"}
    config = json.loads(path.read_text())
    if loading & config.keys():
        kept = {k: v for k, v in config.items() if k not in loading}
        path.write_text(json.dumps(kept, indent=2, ensure_ascii=False) + "\n")


def load_recipe(path: str | None, dataset: str, run_dir: Path, base_results: str | None = None) -> dict:
    """The training recipe for the card: a run's --config file, or from results/converged/results.json the block of
    the run being exported (quality_runs.py names its run folders BLOCK_plain / BLOCK_pointer: ptb_sgd_pointer is
    the ptb_sgd block), else the dataset's block. A fine-tuned run's recipe is its base run's: with `base_results`
    (BLOCK_pointer.results.json) the block comes from that file's name, as fine-tuning folders are named freely."""
    if not path:
        return {}
    recipe = json.loads(Path(path).read_text())
    if "runs" in recipe:
        run = Path(base_results).name.split(".")[0] if base_results else run_dir.name
        names = [run.rsplit("_", 1)[0], dataset]
        block = next((n for n in names if n in recipe["runs"]), None)
        if block is None:
            fail(f"--recipe {path} has no run {' or '.join(map(repr, names))}: it has {sorted(recipe['runs'])}")
        recipe = recipe["runs"][block]
    if "training" in recipe:
        return {k: recipe[k] for k in ("model", "training", "command", "revision") if k in recipe}
    return {"model": recipe.get("model", {}), "training": {k: v for k, v in recipe.items() if k != "model"}}


RUN_KEYS = ("epochs", "steps", "stopped", "train_minutes", "clock", "targets_seen")


def run_summary(path: Path) -> dict:
    """The card's run line from a train.py results.json, or from an eval_results.json exported before (its
    training.run)."""
    if not path.is_file():
        return {}
    results = json.loads(path.read_text())
    results = results.get("training", {}).get("run", results)
    return {k: results[k] for k in RUN_KEYS if k in results}


def fine_tune_stages(configs: list[str] | None, dataset: str) -> list[dict]:
    """Each fine-tuning stage's command and train.py flags, in order; a dataset that is not bundled names its files
    (the user's copies) on the command line."""
    info = DATASETS[dataset]
    train, valid, test = info["files"]
    files = "" if info["bundled"] else f" --train_file {train} --validation_file {valid} --test_file {test}"
    return [{"command": f"python examples/train.py --config {display_path(c)}{files}",
             "training": json.loads(Path(c).read_text())} for c in configs or ()]  # fmt: skip


def main(argv=None):
    args = parse_args(argv)
    run_dir, out_dir = Path(args.run_dir), Path(args.out_dir)
    info = DATASETS[args.dataset]
    tok, model = load_saved_model(str(run_dir))
    if model.config.vocab_size != word_count(tok):
        fail(f"{run_dir}: the tokenizer has {word_count(tok)} words but the model {model.config.vocab_size}")
    try:
        splits = load_text_splits(validation_file=args.validation_file, test_file=args.test_file)
    except (OSError, ValueError) as e:
        fail(e)
    if not (args.validation_file and args.test_file):  # wt2 without files: the bundled splits
        splits = {s: v for s, v in splits.items() if s != "train"}
    ids = {s: encode_lines(tok, lines) for s, lines in splits.items()}  # as the run read them

    # ---- save: tokenizer in the current form (word ids unchanged, open vocabulary), model with its code ----
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = save_tokenizer(tok, info["text_rules"], out_dir)
    for split, lines in splits.items():
        if not torch.equal(encode_lines(tok, lines), ids[split]):
            fail(f"the re-saved tokenizer gives other ids on the {split} split than {run_dir}'s")
    defaults = evaluate_args([str(run_dir)])  # examples/evaluate.py's batch size and bptt
    batch, bptt = defaults.batch_size, defaults.bptt
    model = model.float().eval()
    fp32_test = measure(model, ids["test"], batch, bptt)["ppl"]
    dtype_check = {}
    for dtype in (torch.bfloat16, torch.float16):
        ppl = measure(AutoModelForCausalLM.from_pretrained(run_dir, dtype=dtype).eval(), ids["test"], batch, bptt)
        dtype_check[str(dtype).removeprefix("torch.")] = {"test_ppl": ppl["ppl"],
                                                          "relative_change": ppl["ppl"] / fp32_test - 1}  # fmt: skip
    dtype = "float32"  # shipped weights stay exact; the check tells users what a smaller dtype costs
    suppress_unk_in_generation(model, tok)
    # <eos> is the corpus's line break, not an end of text (neither corpus has one): only the length ends generation.
    # No pad token either: with one and no end token, generate takes a prompt's <eos> for padding (when called
    # without attention_mask); batches come left-padded with their attention_mask from the tokenizer.
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = None
    # top-k 40 sampling: greedy search loops on free-running text (examples/repetition.py, chosen on validation)
    model.generation_config.do_sample, model.generation_config.top_k = True, 40
    # the tokenizer's placeholders are the model's extra outputs; ids of text without them are scored as before
    model.config.unk_token_id = tok.unk_token_id
    if not getattr(tok, "spell_unseen", False):  # a speller's model keeps its slots: the window's spelled words
        model.config.oov_slots = tok.oov_slots
    model.save_pretrained(out_dir, safe_serialization=True)
    ship_pipeline(out_dir)  # pipeline("text-generation", model=out_dir, trust_remote_code=True) writes copied words
    code = ("modeling_pointer_sentinel.py", "generation_pointer_sentinel.py")  # the second as the first's import
    if not all((out_dir / f).is_file() for f in code) or "auto_map" not in json.loads(
        (out_dir / "config.json").read_text()
    ):
        fail("save_pretrained wrote no remote code (auto_map): was the model loaded through this package?")

    # ---- measure the saved folder ----
    shipped = AutoModelForCausalLM.from_pretrained(out_dir, dtype=getattr(torch, dtype)).eval()
    results = {s: measure(shipped, ids[s], batch, bptt) for s in ("validation", "test")}
    fixed = measure(shipped, ids["test"], 1, bptt, FIXED_SLICE_TOKENS)
    name = out_dir.name
    folder = display_path(out_dir)
    bundled = "modeling_pointer_sentinel/data/wikitext-2"  # the commands run from the repository root
    test_file = display_path(args.test_file) if args.test_file else f"{bundled}/wiki.test.tokens.xz"
    valid_file = display_path(args.validation_file) if args.validation_file else f"{bundled}/wiki.valid.tokens.xz"
    data_flags = f" --validation_file {valid_file} --test_file {test_file}" if args.test_file else ""
    recipe = load_recipe(args.recipe, args.dataset, run_dir, args.base_results)
    last_run = run_summary(run_dir / "results.json")
    record = {
        "model": name,
        "dataset": args.dataset,
        "dataset_name": info["name"],
        "test_file": Path(test_file).name,
        "dtype": dtype,
        "validation": results["validation"],
        "test": results["test"],
        "fixed_slice": {
            **fixed,
            "split": "test",
            "first_targets": FIXED_SLICE_TOKENS,
            "command": f"python examples/evaluate.py {folder} --test_file {test_file} --batch_size 1 "
            f"--max_tokens {FIXED_SLICE_TOKENS}",
        },  # fmt: skip
        "commands": {
            "test": f"python examples/evaluate.py {folder}" + (f" --test_file {test_file}" if args.test_file else ""),
            "validation": f"python examples/evaluate.py {folder} --split validation"
            + (f" --validation_file {valid_file}" if args.test_file else ""),
            "export": f"python examples/export_pretrained.py RUN_DIR {folder} --dataset {args.dataset}{data_flags}"
            + (f" --recipe {display_path(args.recipe)}" if args.recipe else "")
            + (f" --fine_tune {' '.join(map(display_path, args.fine_tune))}" if args.fine_tune else "")
            + (f" --base_results {display_path(args.base_results)}" if args.base_results else ""),
        },
        "dtype_check": {"float32_test_ppl": fp32_test, **dtype_check},
        "unk_rate": {s: unk_rate(t, unk_token_id(tok)) for s, t in ids.items()},
        "params": sum(p.numel() for p in shipped.parameters()),
        "training": {
            "recipe": recipe,
            "command": args.train_command or recipe.get("command"),
            "run": run_summary(Path(args.base_results)) if args.base_results else ({} if args.fine_tune else last_run),
            **(
                {"fine_tune": fine_tune_stages(args.fine_tune, args.dataset), "fine_tune_run": last_run}
                if args.fine_tune
                else {}
            ),
        },  # fmt: skip
        "exported": {"revision": git_revision(), "date": datetime.date.today().isoformat()},
    }
    (out_dir / "eval_results.json").write_text(json.dumps(record, indent=2) + "\n")
    (out_dir / "README.md").write_text(model_card(record, shipped.config, args.license))
    print(f"{folder}: validation {results['validation']['ppl']:.2f}, test {results['test']['ppl']:.2f}, fixed slice "
          f"{fixed['ppl']:.2f} ({dtype}; bf16 {dtype_check['bfloat16']['relative_change']:+.3%}, fp16 "
          f"{dtype_check['float16']['relative_change']:+.3%} test perplexity)")  # fmt: skip
    return record


def card_metadata(record: dict, model_name: str, license: str) -> ModelCardData:
    info = DATASETS[record["dataset"]]
    results = [
        EvalResult(
            task_type="text-generation",
            task_name="Language modelling",
            dataset_type=info["hub"],
            dataset_name=info["name"],
            dataset_config=info.get("config"),
            dataset_split=split,
            metric_type="perplexity",
            metric_value=round(record[split]["ppl"], 2),
            metric_name=f"{split.capitalize()} perplexity",
        )  # fmt: skip
        for split in ("test", "validation")
    ]
    return ModelCardData(language="en", license=license, library_name="transformers", pipeline_tag="text-generation",
                         tags=["pointer-sentinel", "lstm", "language-modeling", "custom_code", "word-level"],
                         datasets=[info["hub"]], model_name=model_name, eval_results=results)  # fmt: skip


def run_line(run: dict) -> str:
    """A run's summary for the card: epochs, steps, why it stopped, minutes and on which clock."""
    clock = {"cpu": " (the training process's CPU time)", "wall": " (wall clock)"}
    line = ", ".join(f"{k.replace('_', ' ')} {v:.4g}" if isinstance(v, float) else f"{k.replace('_', ' ')} {v}"
                     for k, v in run.items() if k != "clock")  # fmt: skip
    return line.replace(" minutes ", f" minutes{clock.get(run.get('clock'), '')} ", 1)


def model_card(record: dict, config, license: str) -> str:
    """README.md of the folder: front matter (model-index from the measured figures) and the card's text."""
    name, info = record["model"], DATASETS[record["dataset"]]
    folder = f"pretrained/{name}"
    kind = "Pointer Sentinel-LSTM" if config.use_pointer else "LSTM language model (no pointer)"
    size = f"{config.num_layers}x{config.hidden_size}"
    t, v, f = record["test"], record["validation"], record["fixed_slice"]
    train = record["training"]
    recipe = json.dumps({k: train["recipe"][k] for k in ("model", "training") if k in train["recipe"]}, indent=2)
    run, stages = run_line(train["run"]), train.get("fine_tune", [])
    fine_tune = ""
    if stages:
        steps = "; then ".join(f"`{st['command']}`" for st in stages)
        flags = "\n\n".join(f"```json\n{json.dumps(st['training'], indent=2)}\n```" for st in stages)
        fine_tune = (f"\n\nThen fine-tuned, in order: {steps} (last stage's run: "
                     f"{run_line(train['fine_tune_run']) or 'no results.json'}). Their flags:\n\n{flags}")  # fmt: skip
    dc = record["dtype_check"]
    change = ", ".join(
        f"{d} {dc[d]['test_ppl']:.2f} ({dc[d]['relative_change']:+.3%})" for d in ("bfloat16", "float16")
    )
    data_note = (
        "Penn Treebank's text comes from the LDC Penn Treebank (Mikolov et al.'s preprocessed version, 10k words, "
        "numbers as `N`, lower case); it is not distributed with this model: score it with your own copy."
        if record["dataset"] == "ptb"
        else "WikiText-2 (CC BY-SA 3.0) is bundled with the `modeling_pointer_sentinel` package."
    )
    cutoffs = config.adaptive_softmax_cutoffs
    softmax = (
        f"The vocabulary distribution is an adaptive softmax (Grave et al., 2017) with cutoffs {cutoffs}: the "
        f"{cutoffs[0]:,} most frequent words in its head, the rest in {len(cutoffs)} tail clusters; `logits` are "
        "still the full normalised log-probabilities."
        if cutoffs
        else "The vocabulary distribution is a full softmax."
    )
    what = (
        f"a word-level LSTM language model whose vocabulary softmax is mixed with a pointer over its last "
        f"{config.pointer_window} hidden states, the mixing weight given by a learned sentinel"
        if config.use_pointer
        else "a word-level LSTM language model, the paper's baseline: the same LSTM and softmax without the pointer"
    )
    score_comment = (
        "out.loss.exp()  # perplexity of the mixture; out.gate: the sentinel's share of each prediction"
        if config.use_pointer
        else "out.loss.exp()  # perplexity"
    )
    speller = record.get("speller") if config.speller_size else None
    if speller:
        chosen, test = speller["chosen"], speller.get("test")
        test_flag = f" --test_file {record['test_file']}" if record["dataset"] == "ptb" else ""
        repeat = ("the pointer copies a spelled word when it recurs in its window, and the speller spells it anew "
                  "past it" if config.use_pointer else "this model has no pointer, so every occurrence is spelled "
                  "anew")  # fmt: skip
        speller_note = (
            f"""
## Unseen words: the speller

A word outside the vocabulary is written in its UTF-8 bytes, closed by `</w>`, so the ids carry the text: `decode`
needs no table, and every string has a probability. A byte LSTM of {config.speller_size} units started from the word
LSTM's output h_t (`config.speller_size`) scores the spelling, p(new word) · p_spell(bytes | h_t); {repeat}. The word
model's weights are unchanged (`model-00001-of-00002.safetensors` is the word model's file; the speller's weights are
the second shard), so text in the corpus's form scores exactly as before.

The speller was trained on the training split's words seen at most {chosen["max_train_count"]} times, from this
model's own contexts, for {chosen["epoch"]} epochs, chosen on {speller["held_out_words"]:,} held-out rare words
({speller["valid_occurrences"]:,} validation occurrences, never seen by the speller): {chosen["valid_bits"]:.3f} bits
per symbol (each byte and `</w>`). Built with `{speller["command"]}`."""
            + (
                f"""

Test text, every word scored as the ids carry it: {test["bits_per_byte"]:.4f} bits per UTF-8 byte (each word's bytes
and one separator; {test["bytes"]:,} bytes), word perplexity {test["word_perplexity"]:.2f}
(`python examples/evaluate.py {folder}{test_flag}`)."""
                if test
                else ""
            )
            + "\n"
        )
    else:
        speller_note = ""
    if config.oov_pointer:
        copy_note = (
            "the pointer can copy; these weights were fine-tuned to copy placeholders (`config.oov_pointer`; the "
            "package's model card has the renamed-names figures)"
        )
    elif config.use_pointer:
        copy_note = (
            "the pointer can copy; these weights were not fine-tuned to copy placeholders (`examples/train.py "
            "--unseen_word_rate`), so they rarely do"
        )
    else:
        copy_note = "this model, which has no pointer, cannot copy"
    unseen_note = (
        f"Word-level with a speller: a word outside the {config.vocab_size:,} known ones is spelled in bytes (above)"
        if speller
        else f"Word-level: a word outside the {config.vocab_size:,} known ones becomes a placeholder (one per "
        f"distinct unseen word of a text, up to `config.oov_slots`) that decoding writes back and {copy_note}"
    )
    body = f"""
# {name}

A {size} **{kind}** (Merity, Xiong, Bradbury & Socher, 2016, *Pointer Sentinel Mixture Models*) trained on
{info["name"]}: {what}. {record["params"]:,} parameters,
{config.vocab_size:,}-word vocabulary{", tied input and output embeddings" if config.tie_word_embeddings else ""}.
{softmax}
Built with the `modeling_pointer_sentinel` package; the model's code ships in this folder.

## Results

Measured on this folder's weights ({record["dtype"]}) by `examples/export_pretrained.py`, with the package's own
evaluation (examples/evaluate.py: the whole split as {t["batch_size"]} contiguous streams, state and pointer window
carried across chunks of {t["bptt"]} tokens, one `<eos>` per line, every token a target including `<eos>`):

| split | targets | perplexity |
|---|---:|---:|
| validation | {v["targets"]:,} | {v["ppl"]:.2f} |
| test | {t["targets"]:,} | {t["ppl"]:.2f} |
| test, first {f["first_targets"]:,} targets, batch 1 | {f["targets"]:,} | {f["ppl"]:.4f} |

`<unk>` (a word of the corpus) is {record["unk_rate"]["test"]:.2%} of the test targets. Reproduce:
`{record["commands"]["test"]}`; the fixed slice: `{f["command"]}`.
Perplexities are per word-level token of this tokenisation and are comparable only with models scored the same way
on the same files (not with per-word perplexities of detokenised text, e.g. lm-evaluation-harness's `wikitext`).
{speller_note}
Weights ship as {record["dtype"]}. Loaded with a smaller `dtype`, test perplexity is {change}; float32
{dc["float32_test_ppl"]:.2f}.

## Training

Trained with `examples/train.py` of modeling_pointer_sentinel{f" (`{train['command']}`)" if train["command"] else ""};
run: {run or "no results.json in the run folder"}. Recipe (model fields and training flags):

```json
{recipe}
```{fine_tune}

Exported with `{record["commands"]["export"]}`.

## Use

```python
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

path = "{folder}"
model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, dtype=torch.float32)
tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
generator = pipeline("text-generation", model=path, trust_remote_code=True, dtype=torch.float32)  # the folder's own
# a prompt starts a line, as every training line does after an <eos>: the zero state with no <eos> before it
# is a context training never saw (the PTB pointer model ends the line at once there)
print(generator("\\n{info["prompt"]}", max_new_tokens=20, do_sample=True, top_k=40)[0]["generated_text"])

ids = tok("{info["scored"]}\\n", return_tensors="pt").input_ids  # line break -> <eos>
out = model(ids, labels=ids)
{score_comment}
```

`trust_remote_code=True` runs the code in this folder (`modeling_pointer_sentinel.py`, `generation_pointer_sentinel.py`,
`configuration_pointer_sentinel.py`); with the `modeling_pointer_sentinel` package installed and imported, the
package's classes load it without remote code. The tokenizer reads each line break as `<eos>`, as the training data
was read, and decodes `<eos>` to a line break. `<eos>` does not end generation (neither corpus marks the end of a
text): `generation_config.json` names no end token, so a sample runs to `max_new_tokens`, and no pad token
(`generate` would take a prompt's `<eos>` for padding).
To score a long text, pass it whole or in chunks with `past_key_values` (the LSTM state and the pointer window carry).

## Limitations

- {unseen_note}. Perplexity counts `<unk>` as a word (see the package's model card for the unknown-penalised
  perplexity). The input must be in the corpus's form. The tokenizer puts raw text into it ({
        "PTB's: lower case, numbers and `%` as `N`, `n't` split off, punctuation dropped but for the corpus's own "
        "`$`, `&`, `#` and `'`"
        if record["dataset"] == "ptb"
        else "WikiText's: punctuation and clitics split off, `@-@`, `@,@` and `@.@` inside words and numbers"
    }) and decodes back to natural text; the card's perplexities are on the corpus's own text.
- A small model trained on a small corpus ({info["name"]}); its text is fluent only locally. Not for use beyond
  language-modelling research and teaching.
- {data_note}
- lm-evaluation-harness: pass `max_length` (the config has no context length; see the package README).

## Citation

```bibtex
@inproceedings{{merity2017pointer,
  title={{Pointer Sentinel Mixture Models}},
  author={{Merity, Stephen and Xiong, Caiming and Bradbury, James and Socher, Richard}},
  booktitle={{ICLR}}, year={{2017}}}}
```
"""
    meta = card_metadata(record, name, license)
    return str(ModelCard(f"---\n{meta.to_yaml()}\n---\n{body}"))


if __name__ == "__main__":
    main()
