"""Give a word-level model folder a speller, so that its ids carry the text: a word its vocabulary lacks is written in
its UTF-8 bytes (the tokenizer in spell mode) and scored by the speller, p_spell(word | h_t), conditioned on the word
LSTM's output; the pointer then copies the spelled word when it recurs (modeling_pointer_sentinel.py, "the ids carry
the text"). The word model's own weights are left as they are, so text in corpus form scores exactly as before.

Each setting of the grid trains a speller on the training split's words seen at most --max_train_count times (the
rare words, closest to the words it will spell), from the folder's own contexts. One rare word in --held_out is kept
from that training, so that the validation split's occurrences of those words are spellings the speller has never
seen, as a new word's are: the setting and epoch with the fewest bits per symbol on them is saved.

    python examples/add_speller.py pretrained/wt2-pointer-sentinel-lstm-2x200 out/wt2-pointer-speller \\
        --max_train_count 5 20 50 --speller_size 128 256 --epochs 3 --output_json speller_grid.json
"""

import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import (  # noqa: E402
    ArgumentParser,
    add_data_arguments,
    check_model_folder,
    check_ranges,
    fail,
    load_saved_model,
    load_splits,
    non_negative,
    positive,
)


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a word-level model folder (its tokenizer and weights)")
    p.add_argument("output_dir", help="where the folder with its speller is saved")
    add_data_arguments(p)
    p.add_argument("--max_train_count", type=int, nargs="+", default=[20], help="the grid's training thresholds")
    p.add_argument("--speller_size", type=int, nargs="+", default=[256], help="the grid's speller widths")
    p.add_argument("--epochs", type=int, default=3, help="each setting's epochs; every epoch is a candidate")
    p.add_argument("--valid_max_count", type=int, default=20, help="the held-out words are seen at most this often")
    p.add_argument("--held_out", type=int, default=10, help="one word in N seen at most --valid_max_count times "
                   "(by a checksum of its spelling) is kept from the speller's training")  # fmt: skip
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num_threads", type=int, default=None)
    p.add_argument("--output_json", help="the grid's figures and the choice")
    args = p.parse_args(argv)
    check_ranges(p, args, [("--max_train_count", positive, "positive"),
                           ("--speller_size", positive, "positive"),
                           ("--epochs", positive, "positive"), ("--valid_max_count", positive, "positive"),
                           ("--held_out", lambda n: n >= 2, ">= 2"),
                           ("--lr", positive, "positive"), ("--seed", non_negative, ">= 0")])  # fmt: skip
    check_model_folder(p, "model", args.model)
    if Path(args.output_dir).resolve() == Path(args.model).resolve():
        p.error("output_dir must differ from model: the word model's folder is read, not overwritten")
    return args


def main(argv=None):
    args = parse_args(argv)
    import torch

    from modeling_pointer_sentinel.spelling import (
        held_out,
        speller_bits_per_byte,
        speller_pairs,
        train_speller,
        with_speller,
        word_spellings,
    )
    from modeling_pointer_sentinel.tokenization import spelling_vocabulary
    from modeling_pointer_sentinel.training import encode_lines

    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    tok, word_model = load_saved_model(args.model)
    if word_model.config.speller_size:
        fail(f"{args.model} has a speller already")
    try:
        spelled_tok = spelling_vocabulary(tok)
    except ValueError as e:
        fail(f"{args.model}: {e}")
    splits = load_splits(args)
    if "validation" not in splits:
        fail("the data flags name no validation split: the grid is chosen on it")
    V = word_model.config.vocab_size
    ids = {s: encode_lines(tok, splits[s]) for s in ("train", "validation")}
    counts = torch.bincount(ids["train"][ids["train"] < V], minlength=V)
    spellings = word_spellings(tok, range(V))
    special = {tok.unk_token_id, tok.eos_token_id}

    def seen_at_most(n):
        return {w for w in range(V) if 0 < counts[w] <= n and w not in special}

    held = {w for w in seen_at_most(args.valid_max_count) if held_out(spellings[w], args.held_out)}
    h, words = speller_pairs(word_model, ids["train"], seen_at_most(max(args.max_train_count)) - held)
    valid_h, valid_words = speller_pairs(word_model, ids["validation"], held)
    if not len(valid_words):
        fail(f"the validation split holds none of the {len(held)} held-out words (one in --held_out "
             f"{args.held_out} of those seen at most --valid_max_count {args.valid_max_count} times): the grid "
             "cannot be chosen")  # fmt: skip
    print(f"validation: {len(valid_words):,} occurrences of {len(held):,} held-out words seen at most "
          f"{args.valid_max_count} times in training")  # fmt: skip
    grid, best = [], None
    for n in args.max_train_count:
        pick = counts[words] <= n
        if not pick.any():
            fail(f"--max_train_count {n}: no training word outside the held-out ones is seen at most {n} times")
        for size in args.speller_size:
            torch.manual_seed(args.seed)
            speller = with_speller(word_model, size).speller

            def score(epoch, n=n, size=size, speller=speller):
                nonlocal best
                bits = speller_bits_per_byte(speller, valid_h, valid_words, spellings)
                grid.append({"max_train_count": n, "speller_size": size, "epoch": epoch, "valid_bits": bits})
                print(f"max_train_count {n}, speller_size {size}, epoch {epoch}: {bits:.4f} validation bits/symbol")
                if best is None or bits < best[0]["valid_bits"]:
                    best = grid[-1], copy.deepcopy(speller.state_dict())

            print(f"max_train_count {n}: {int(pick.sum()):,} training occurrences")
            train_speller(speller, h[pick], words[pick], spellings, epochs=args.epochs, lr=args.lr, seed=args.seed,
                          after_epoch=score)  # fmt: skip
    choice, state = best
    model = with_speller(word_model, choice["speller_size"])
    model.speller.load_state_dict(state)
    settings = ("model", "max_train_count", "speller_size", "epochs", "valid_max_count", "held_out", "lr", "seed")
    result = {k: getattr(args, k) for k in settings} | {"grid": grid, "chosen": choice}
    result |= {"held_out_words": len(held), "valid_occurrences": len(valid_words)}
    test = None
    save_folder(model, spelled_tok, Path(args.model), Path(args.output_dir))
    if "test" in splits:  # the saved folder's bits per byte, measured as evaluate.py does
        from evaluate import main as evaluate

        names = ("dataset_name", "dataset_config_name", "test_file", "data_cache_dir")
        flags = [f"--{n}={getattr(args, n)}" for n in names if getattr(args, n, None)]
        test = evaluate([args.output_dir, *flags, *(["--num_threads", str(args.num_threads)] * bool(args.num_threads))])
        result["test"] = test
    record_speller(Path(args.model), Path(args.output_dir), model.config, result, speller_command(args))
    print(f"chosen on validation: {json.dumps(choice)}; saved to {args.output_dir}")
    if args.output_json:
        Path(args.output_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output_json).write_text(json.dumps(result, indent=1) + "\n")


WORD_WEIGHTS, SHARDS = "model.safetensors", ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def save_folder(model, tok, word_folder: Path, out: Path):
    """Save the model with its speller and the spell-mode tokenizer. The word model's weights file is kept byte for
    byte as the first of two shards and the speller's weights are the second (model.safetensors.index.json names
    both): the word weights are unchanged, and a repository that held the word model stores only the speller anew."""
    import shutil

    import torch
    from export_pretrained import drop_loading_keys
    from safetensors.torch import load_file, save_file

    from modeling_pointer_sentinel.pipeline_pointer_sentinel import ship_pipeline

    model.save_pretrained(out)
    tok.save_pretrained(out)
    drop_loading_keys(out)  # how the tokenizer was loaded is not what it is
    if (word_folder / "pipeline_pointer_sentinel.py").is_file():
        ship_pipeline(out)
    whole, word_file = out / WORD_WEIGHTS, word_folder / WORD_WEIGHTS
    if not (whole.is_file() and word_file.is_file()):
        return  # a sharded word model: save_pretrained's own layout
    saved, words = load_file(whole), load_file(word_file)
    speller = {k: v for k, v in saved.items() if k not in words}
    if set(saved) - set(speller) != set(words) or not all(torch.equal(saved[k], words[k]) for k in words):
        return  # the word weights were saved otherwise (another tying): one file
    shutil.copyfile(word_file, out / SHARDS[0])
    save_file(speller, out / SHARDS[1], metadata={"format": "pt"})
    total = sum(t.numel() * t.element_size() for t in saved.values())
    weight_map = {k: SHARDS[k in speller] for k in sorted(saved)}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / f"{WORD_WEIGHTS}.index.json").write_text(json.dumps(index, indent=2) + "\n")
    whole.unlink()


def speller_command(args) -> str:
    """This run's command as a card shows it: the folder as given when inside the checkout, data files by name."""
    from export_pretrained import display_path

    flags = [f"--{s}_file {Path(getattr(args, f'{s}_file')).name}" for s in ("train", "validation", "test")
             if getattr(args, f"{s}_file", None)]  # fmt: skip
    grid = (f"--max_train_count {' '.join(map(str, args.max_train_count))} --speller_size "
            f"{' '.join(map(str, args.speller_size))} --epochs {args.epochs}")  # fmt: skip
    return " ".join(["python examples/add_speller.py", display_path(args.model), "OUT", *flags, grid])


def record_speller(word_folder: Path, out: Path, config, result: dict, command: str):
    """A shipped folder (one with eval_results.json and a card) keeps both, with the speller's figures added."""
    record_file = word_folder / "eval_results.json"
    if not record_file.is_file():
        return
    from export_pretrained import model_card
    from huggingface_hub import ModelCard

    record = json.loads(record_file.read_text())
    keep = ("chosen", "held_out_words", "valid_occurrences", "test")
    record["speller"] = {k: result[k] for k in keep if k in result} | {"command": command}
    (out / "eval_results.json").write_text(json.dumps(record, indent=2) + "\n")
    card = word_folder / "README.md"
    license = (ModelCard.load(card).data.license if card.is_file() else None) or "bsd-3-clause"
    (out / "README.md").write_text(model_card(record, config, license))


if __name__ == "__main__":
    main()
