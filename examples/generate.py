r"""Sample from a saved Pointer Sentinel-LSTM.

    python examples/generate.py outputs/quickstart --prompt "the company said" --max_new_tokens 30 --do_sample \
        --temperature 0.8 --top_k 50 --seed 0 --show_gate

Each sample ends at its first <eos> (a line end; shorter samples of a batch are padded with it). --show_gate prints,
for each generated word w, the share of its probability that came from the pointer, sum_{i: x_i = w} a_i / p_mix(w)
(0 for a word not in the window), and g, the weight of the vocabulary softmax at that step. A missing model folder or
an out-of-range flag stops the script with one `error:` line on stderr and exit status 2.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import ArgumentParser, check_ranges, describe_ranges, fail, load_saved_model  # noqa: E402

RANGES = [  # checked by cli.check_ranges (a float must also be finite) and stated in --help
    ("--max_new_tokens", lambda v: v >= 1, ">= 1"),
    ("--temperature", lambda v: v > 0, "a number > 0"),
    ("--top_k", lambda v: v >= 0, ">= 0 (0: off)"),
    ("--top_p", lambda v: 0 < v <= 1, "in (0, 1] (1: off)"),
    ("--num_beams", lambda v: v >= 1, ">= 1"),
    ("--num_return_sequences", lambda v: v >= 1, ">= 1"),
    ("--repetition_penalty", lambda v: v > 0, "a number > 0 (1: off)"),
    ("--seed", lambda v: 0 <= v < 2**32, "in [0, 2**32)"),
]
BLANK = "--prompt has no words to continue: give text, or leave --prompt out to sample a line from its start"


def check_flags(p, args):
    """Every numeric flag in range, and the combinations generate would refuse, as one error line each."""
    check_ranges(p, args, RANGES)
    if args.num_beams > 1 and args.num_return_sequences > args.num_beams:
        p.error(f"--num_return_sequences {args.num_return_sequences} must be <= --num_beams {args.num_beams}")
    if args.num_beams == 1 and not args.do_sample and args.num_return_sequences > 1:
        p.error("--num_return_sequences > 1 needs --do_sample or --num_beams (greedy decoding gives one sequence)")
    if args.show_gate and args.no_pointer_mix:
        p.error("--show_gate reports the pointer's share of the mixture; with --no_pointer_mix there is none")


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="directory written by save_pretrained (model + tokenizer)")
    p.add_argument("--prompt", help="text to continue, from a line start (<eos> before it); without it, a line is "
                   "sampled from its start")  # fmt: skip
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
    p.add_argument("--show_gate", action="store_true",
                   help="for each generated word w, print the share of its probability that came from the pointer, "
                   "sum_{i: x_i = w} a_i / p_mix(w) (0 for a word not in the window), and g, the weight of the "
                   "vocabulary softmax at that step")  # fmt: skip
    describe_ranges(p, RANGES)
    args = p.parse_args(argv)
    check_flags(p, args)
    if args.prompt is not None and not args.prompt.strip():
        p.error(BLANK)
    if not Path(args.model).is_dir():
        p.error(f"{args.model}: no such model folder (give a folder written by save_pretrained, e.g. train.py's "
                "--output_dir)")  # fmt: skip
    return args


if __name__ == "__main__":  # a mistaken command line fails here, before the imports below (torch: 8-40 s)
    parse_args()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import set_seed  # noqa: E402

import modeling_pointer_sentinel  # noqa: E402,F401  (registers the Auto classes)
from modeling_pointer_sentinel.pipeline_pointer_sentinel import continuation  # noqa: E402


def until_eos(new: torch.Tensor, eos: int | None) -> torch.Tensor:
    """The generated tokens up to and including the first <eos>: what follows it is padding."""
    hits = (new == eos).nonzero()
    return new if eos is None or hits.numel() == 0 else new[: int(hits[0, 0]) + 1]


def pointer_shares(model, seq: torch.Tensor, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each of the n words w = seq[start + j]: the gate g of the step that predicted it, and the share of its
    mixture probability that came from the pointer, sum_{i: x_i = w} a_i / p_mix(w), from one forward pass over the
    unpadded sequence (the window of position t holds positions t-L+1 ... t, oldest first, as pointer_attention)."""
    L = model.config.pointer_window
    context = seq[None, : start + n - 1]
    with torch.no_grad():
        out = model(context)
    at = slice(start - 1, start + n - 1)  # position t predicts the word at t + 1
    words = seq[start : start + n]
    windows = F.pad(context, (L - 1, 0), value=-1).unfold(1, L, 1)[0, at]  # (n, L); -1: no token yet
    mass = (out.pointer_attention[0, at] * (windows == words[:, None])).sum(-1)
    p_mix = out.logits[0, at].gather(-1, words[:, None]).squeeze(-1).exp()
    return out.gate[0, at], mass / p_mix


def main(argv=None):
    args = parse_args(argv)
    set_seed(args.seed)
    tok, model = load_saved_model(args.model)
    if args.show_gate and not model.config.use_pointer:
        fail(f"--show_gate: the model in {args.model} has no pointer (use_pointer=False)")
    # Every training line follows an <eos>: the prompt starts a line (from the zero state without one, the PTB pointer
    # model ends the line at once). Its words the vocabulary lacks are placeholders the pointer can copy.
    enc = tok(args.prompt or "", add_special_tokens=False)
    table = enc.oov_words[0] if getattr(enc, "oov_words", None) else None
    prompt_ids, eos = enc["input_ids"], tok.eos_token_id
    if args.prompt is not None and not prompt_ids:
        fail(BLANK)  # text the rules drop whole (PTB's punctuation)
    ids = torch.tensor([prompt_ids if prompt_ids[:1] == [eos] else [eos, *prompt_ids]])
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),  # every id is real: without it, generate takes the <eos> for padding
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
    prompt = args.prompt or ""
    for seq in out:
        new = until_eos(seq[ids.shape[1] :], tok.eos_token_id)
        text = continuation(tok, ids[0].tolist(), new.tolist(), table)  # as the folder's pipeline writes it
        print(prompt + (text.removeprefix(" ") if prompt[-1:].isspace() else text).rstrip("\n"))
        if args.show_gate:
            gate, share = pointer_shares(model, seq, ids.shape[1], len(new))
            for word, g, s in zip(tok.convert_ids_to_tokens(new.tolist()), gate.tolist(), share.tolist(), strict=True):
                print(f"  {word:>15s}  from_pointer={s:.3f}  g={g:.3f}")


if __name__ == "__main__":
    main()
