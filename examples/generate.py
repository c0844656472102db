"""Sample from a saved Pointer Sentinel-LSTM.

    python examples/generate.py outputs/quickstart --prompt "the company said" --max_new_tokens 30 --do_sample \
        --temperature 0.8 --top_k 50 --seed 0 --show_gate

Each sample ends at its first <eos> (a line end; shorter samples of a batch are padded with it). A missing model
folder stops the script with one `error:` line on stderr and exit status 2.
"""

import argparse
import sys
from pathlib import Path

import torch
from transformers import set_seed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import ArgumentParser, load_saved_model  # noqa: E402

import modeling_pointer_sentinel  # noqa: E402,F401  (registers the Auto classes)


def until_eos(new: torch.Tensor, eos: int | None) -> torch.Tensor:
    """The generated tokens up to and including the first <eos>: what follows it is padding."""
    hits = (new == eos).nonzero()
    return new if eos is None or hits.numel() == 0 else new[: int(hits[0, 0]) + 1]


def join_text(prompt: str, continuation: str) -> str:
    """Prompt and decoded continuation with one space between (the word-level decoder starts every word with one)."""
    return " ".join(part for part in (prompt.strip(), continuation.strip()) if part)


def main(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="directory written by save_pretrained (model + tokenizer)")
    p.add_argument("--prompt", default="", help="empty: start from <eos> (a sentence start)")
    p.add_argument("--max_new_tokens", type=int, default=30)
    p.add_argument("--do_sample", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top_k", type=int, default=0)
    p.add_argument("--top_p", type=float, default=1.0)
    p.add_argument("--num_beams", type=int, default=1)
    p.add_argument("--num_return_sequences", type=int, default=1)
    p.add_argument("--repetition_penalty", type=float, default=1.0)
    p.add_argument("--no_pointer_mix", action="store_true", help="sample from the vocabulary softmax alone")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show_gate", action="store_true", help="print g (share from the vocabulary) for each new token")
    args = p.parse_args(argv)
    if not Path(args.model).is_dir():
        p.error(f"{args.model}: no such model folder (give a folder written by save_pretrained, e.g. train.py's "
                "--output_dir)")  # fmt: skip

    set_seed(args.seed)
    tok, model = load_saved_model(args.model)
    ids = tok(args.prompt or tok.eos_token, return_tensors="pt")["input_ids"]
    out = model.generate(
        ids,
        max_new_tokens=args.max_new_tokens,
        do_sample=args.do_sample,
        temperature=args.temperature,
        top_k=args.top_k or None,
        top_p=args.top_p,
        num_beams=args.num_beams,
        num_return_sequences=args.num_return_sequences,
        repetition_penalty=args.repetition_penalty,
        pointer_mix=not args.no_pointer_mix,
        pad_token_id=tok.pad_token_id,
    )
    for seq in out:
        new = until_eos(seq[ids.shape[1] :], tok.eos_token_id)
        print(join_text(args.prompt, tok.decode(new, skip_special_tokens=True)))
        if args.show_gate and model.config.use_pointer:
            with torch.no_grad():  # g at position t weighs the prediction of token t+1
                gate = model(seq[None, : ids.shape[1] + len(new) - 1]).gate[0, ids.shape[1] - 1 :]
            for word, g in zip(tok.convert_ids_to_tokens(new.tolist()), gate.tolist(), strict=True):
                print(f"  {word:>15s}  g={g:.3f}  pointer={1 - g:.3f}")


if __name__ == "__main__":
    main()
