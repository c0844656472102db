"""Try a shipped pretrained model (no training): generate from a prompt through `pipeline("text-generation")`, then
score a test set and print its perplexity next to the one the model card records.

    python examples/try_pretrained.py              # the WikiText-2 model: generate, score the bundled test split
    python examples/try_pretrained.py --model pretrained/ptb-pointer-sentinel-lstm-2x200 --test_file ptb.test.txt
    python examples/try_pretrained.py --model pretrained/NAME --prompt "the company said" --max_new_tokens 30

The model folder's eval_results.json names its dataset: a WikiText-2 model is scored on the bundled WikiText-2 test
split without any flag; Penn Treebank is not bundled (its text is the LDC's), so a PTB model is scored when you pass
your copy of ptb.test.txt. A missing folder, or a test file that is missing, empty or not UTF-8 text, stops the script
with one `error:` line and exit status 2, before any sample. Sampling shows a progress bar once it has taken 2 s;
Ctrl+C stops the script.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py and evaluate.py beside this script
from cli import (  # noqa: E402
    ArgumentParser,
    check_ranges,
    check_text_file,
    ctrl_c_stops,
    describe_ranges,
    fail,
    load_errors,
    positive,
)

PRETRAINED = Path(__file__).resolve().parents[1] / "pretrained"
DEFAULT_MODEL = PRETRAINED / "wt2-pointer-sentinel-lstm-2x200"  # WikiText-2 is bundled: scored with no flag


RANGES = [("--max_new_tokens", positive, "a positive integer"), ("--num_samples", positive, "a positive integer"),
          ("--num_threads", positive, "a positive integer"), ("--seed", lambda v: v >= 0, ">= 0")]  # fmt: skip


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--model", default=str(DEFAULT_MODEL), help="a folder of pretrained/ (default: %(default)s)")
    a("--prompt", default=None, help="text to continue (default: one in the style of the model's corpus)")
    a("--max_new_tokens", type=int, default=30)
    a("--num_samples", type=int, default=2)
    a("--seed", type=int, default=0)
    a("--test_file", help="the test split to score (PTB models: your copy of ptb.test.txt; WikiText-2: bundled)")
    a("--num_threads", type=int, default=None, help="torch CPU threads")
    describe_ranges(p, RANGES)
    args = p.parse_args(argv)
    check_ranges(p, args, RANGES)
    if not (Path(args.model) / "eval_results.json").is_file():
        p.error(f"{args.model}: no shipped model there (a folder of pretrained/ with eval_results.json; the PTB "
                "models are added with examples/export_pretrained.py)")  # fmt: skip
    check_text_file(p, "--test_file", args.test_file, decode=True)  # before the samples: a folder, no text, binary
    return args


if __name__ == "__main__":  # a mistaken command line fails here, before the imports below (torch: 8-40 s)
    parse_args()

import torch  # noqa: E402
from evaluate import parse_args as evaluate_args  # noqa: E402
from evaluate import streams_for  # noqa: E402
from export_pretrained import DATASETS  # noqa: E402
from generate import StepBar, how_to_stop  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402
from transformers import pipeline, set_seed  # noqa: E402

from modeling_pointer_sentinel.evaluation import collect_outputs  # noqa: E402
from modeling_pointer_sentinel.spelling import without_speller  # noqa: E402
from modeling_pointer_sentinel.training import encode_lines, load_text_splits  # noqa: E402


def main(argv=None):
    args = parse_args(argv)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    start = time.perf_counter()
    record = json.loads((Path(args.model) / "eval_results.json").read_text())
    set_seed(args.seed)
    try:
        generator = pipeline("text-generation", model=args.model, trust_remote_code=True, dtype=torch.float32)
    except load_errors() as e:  # a damaged folder: a missing or unreadable file, a config.json that does not fit
        fail(f"cannot load the model in {args.model}: {str(e).strip().splitlines()[-1]}")  # pipeline's last cause
    prompt = args.prompt if args.prompt is not None else DATASETS[record["dataset"]]["prompt"]
    print(f"{record['model']}: {record['dataset_name']}, test perplexity {record['test']['ppl']:.2f} on its card")
    # Every training line follows an <eos> (the tokenizer's line break); from the zero state with none before it the
    # PTB pointer model ends the line at once (p(<eos>) 0.7579 after "the company said", 0.0001 after a line break;
    # the README's command measures it), so the prompt starts a line.
    how_to_stop(args.max_new_tokens)
    bar = StepBar(args.max_new_tokens)
    try:
        samples = generator("\n" + prompt, max_new_tokens=args.max_new_tokens, do_sample=True, top_k=40,
                            num_return_sequences=args.num_samples, streamer=bar)  # fmt: skip
    except KeyboardInterrupt:
        bar.stop()  # the bar's line ends, then ctrl_c_stops says why
        raise
    for s in samples:
        print("sample:", s["generated_text"].lstrip("\n"))

    if args.test_file:
        lines = load_text_splits(test_file=args.test_file)["test"]
    elif record["dataset"] == "wt2":
        lines = load_text_splits()["test"]  # the bundled WikiText-2
    else:
        print(f"not scored: {record['dataset_name']} is not bundled with this package; pass --test_file with your "
              f"copy of {record['test_file']} to score it")  # fmt: skip
        return None
    try:
        ids = encode_lines(generator.tokenizer, lines)
        defaults = evaluate_args([args.model])  # examples/evaluate.py's batch and bptt: the card's measurement
        streams = streams_for(ids, defaults.batch_size, None)
    except ValueError as e:
        fail(e)
    model = generator.model
    if model.config.speller_size:  # the card's figure is the word model's, on text in the corpus's form
        if int(ids.max()) >= model.config.vocab_size:
            print(f"not scored: this text spells words outside the vocabulary; `python examples/evaluate.py "
                  f"{args.model} --test_file {args.test_file}` scores it in bits per byte")  # fmt: skip
            return None
        model = without_speller(model)
    with tqdm(total=streams[:, 1:].numel(), desc="test", unit="tok") as bar:
        ppl = collect_outputs(model, streams, defaults.bptt, progress=bar).perplexity()
    print(f"test perplexity {ppl:.2f} over {streams[:, 1:].numel():,} targets (the card: {record['test']['ppl']:.2f} "
          f"on {record['test_file']}) in {time.perf_counter() - start:.0f} s")  # fmt: skip
    return ppl


if __name__ == "__main__":
    with ctrl_c_stops():
        main()
