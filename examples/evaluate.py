"""Evaluate a saved model: perplexity with and without the pointer, the neural cache, and analysis pictures.

    python examples/evaluate.py outputs/quickstart                                  # bundled WikiText-2 test split
    python examples/evaluate.py outputs/ptb_pointer --test_file ../shared/data/ptb/ptb.test.txt \
        --validation_file ../shared/data/ptb/ptb.valid.txt --train_file ../shared/data/ptb/ptb.train.txt \
        --cache_grid --compare outputs/ptb_plain --plots outputs/ptb_plots

Standard conventions: one <eos> per line, the whole split as `--batch_size` contiguous streams, state carried.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import add_data_arguments  # noqa: E402

import modeling_pointer_sentinel  # noqa: E402,F401  (registers the Auto classes)
from modeling_pointer_sentinel.evaluation import (  # noqa: E402
    NeuralCache,
    bucket_log_ppl_difference,
    cache_grid_search,
    collect_outputs,
    frequency_buckets,
    gate_statistics,
)
from modeling_pointer_sentinel.plotting import (  # noqa: E402
    plot_bucket_differences,
    plot_gate_histogram,
    pointer_window_picture,
)
from modeling_pointer_sentinel.training import (  # noqa: E402
    encode_lines,
    load_text_splits,
    shard_streams,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("model", help="a directory written by save_pretrained (model and tokenizer)")
    a("--split", default="test", choices=["validation", "test"])
    add_data_arguments(p)
    a("--batch_size", type=int, default=10)
    a("--bptt", type=int, default=200)
    a("--max_tokens", type=int, default=None, help="evaluate the first N tokens only")
    a("--cache", action="store_true", help="add Grave et al.'s neural cache")
    a("--cache_window", type=int, default=3785)
    a("--cache_theta", type=float, default=0.662)
    a("--cache_lambda", type=float, default=0.1279)
    a("--cache_grid", action="store_true", help="choose window/theta/lambda on validation, then apply them")
    a("--compare", help="a second model: per-frequency-bucket log-perplexity difference (paper Figure 4)")
    a("--buckets", type=int, default=10)
    a("--plots", help="write PNG (and HTML) pictures to this directory")
    a("--picture_positions", type=int, nargs="*", default=None, help="positions for pointer pictures")
    a("--output_json")
    return p.parse_args(argv)


def streams_for(ids, batch_size, max_tokens):
    if max_tokens:
        ids = ids[: max_tokens + 1]
    return shard_streams(ids, batch_size)


def main(argv=None):
    args = parse_args(argv)
    if args.plots:  # fail now, not after the whole evaluation
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise SystemExit("--plots needs matplotlib: pip install matplotlib") from None
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    splits = load_text_splits(args.dataset_name, args.dataset_config_name, args.train_file, args.validation_file,
                              args.test_file)  # fmt: skip
    if args.split not in splits:
        raise ValueError(f"No {args.split} split was given.")
    ids = {s: encode_lines(tok, lines) for s, lines in splits.items()}
    need_hidden = args.cache or args.cache_grid

    def run(m, split):
        streams = streams_for(ids[split], args.batch_size, args.max_tokens)
        with tqdm(total=streams.numel(), desc=f"{split}", unit="tok") as bar:
            return collect_outputs(m, streams, args.bptt, keep_hidden=need_hidden, progress=bar)

    out = run(model, args.split)
    results = {"split": args.split, "tokens": out.targets.numel(), "ppl": out.perplexity()}
    if model.config.use_pointer:
        results["ppl_pointer_off"] = out.perplexity(pointer=False)
        results.update(gate_statistics(out, tok))
    if args.cache_grid:
        val = out if args.split == "validation" else run(model, "validation")
        # a small grid around Grave et al.'s and AWD-LSTM's values (WT2: window 3785, theta 0.662, lambda 0.1279)
        grid = cache_grid_search(val, windows=[500, 2000, 3785], thetas=[0.3, 0.662, 1.0],
                                 lambdas=[0.05, 0.1279, 0.2, 0.3])  # fmt: skip
        results["cache_grid"] = grid
        best = grid[0]
        args.cache_window, args.cache_theta, args.cache_lambda = best["window"], best["theta"], best["lam"]
        results["cache_grid_best_on_validation"] = best
    if args.cache or args.cache_grid:
        cache = NeuralCache(args.cache_window, args.cache_theta, args.cache_lambda)
        mixed = cache(out.hidden, out.targets, out.log_probs)
        results["ppl_with_cache"] = torch.exp(-mixed.double().mean()).item()
        results["cache"] = dict(window=args.cache_window, theta=args.cache_theta, lam=args.cache_lambda,
                                alignment="h_i keys x_{i+1} (Grave et al.)")  # fmt: skip
    if args.plots:
        plots = Path(args.plots)
        plots.mkdir(parents=True, exist_ok=True)
        if model.config.use_pointer:
            plot_gate_histogram(out, plots / "gate_histogram.png")
            flat = ids[args.split]
            positions = args.picture_positions
            if positions is None:  # the first positions where the pointer carried most of the target's probability
                share = 1 - torch.exp(out.gate.double().log() + out.vocab_log_probs - out.log_probs)
                share = share.masked_fill(out.targets == tok.eos_token_id, -1)  # line ends are easy; show words
                row0 = share[0, model.config.pointer_window :]
                positions = (torch.topk(row0, 3).indices + model.config.pointer_window).tolist()
                flat = streams_for(ids[args.split], args.batch_size, args.max_tokens)[0]
            for k, pos in enumerate(positions):
                pointer_window_picture(model, tok, flat, pos, plots / f"pointer_{k}.png", plots / f"pointer_{k}.html")
    if args.compare:
        other = AutoModelForCausalLM.from_pretrained(args.compare, dtype=torch.float32).eval()
        if other.config.vocab_size != model.config.vocab_size:
            raise ValueError("--compare needs a model with the same vocabulary.")
        out_b = run(other, args.split)
        if "train" not in ids:
            raise ValueError("--compare needs the training split for word frequencies.")
        buckets = frequency_buckets(ids["train"], out.targets, args.buckets)
        diffs = bucket_log_ppl_difference(out.log_probs, out_b.log_probs, buckets, args.buckets)
        results["compare"] = {"model": args.compare, "ppl": out_b.perplexity(), "bucket_log_ppl_gain": diffs}
        if args.plots:
            plot_bucket_differences(diffs, Path(args.plots) / "frequency_buckets.png", Path(args.model).name,
                                    Path(args.compare).name)  # fmt: skip
    print(json.dumps(results, indent=2))
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
