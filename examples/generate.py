r"""Sample from a saved Pointer Sentinel-LSTM.

    python examples/generate.py outputs/quickstart --prompt "the company said" --max_new_tokens 30 --do_sample \
        --temperature 0.8 --top_k 50 --seed 0 --show_gate

Each sample ends at its first <eos> (a line end; shorter samples of a batch are padded with it). --show_gate prints,
for each generated word w, the share of its probability that came from the pointer, sum_{i: x_i = w} a_i / p_mix(w)
(0 for a word not in the window), and g, the weight of the vocabulary softmax at that step. One sample's words are
printed as they come; several samples are printed at their end (a progress bar on stderr once sampling has taken 2 s),
and so is beam search's. A request for over 1,000 tokens is told that Ctrl+C stops it, which ends the script with one
line on stderr. A missing model folder or one without a model's files, or an out-of-range flag stops the script with
one `error:` line on stderr and exit status 2, before the model's weights load.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import (  # noqa: E402
    ArgumentParser,
    check_model_folder,
    check_ranges,
    ctrl_c_stops,
    describe_ranges,
    fail,
    load_saved_model,
    load_saved_tokenizer,
    saved_config,
)

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
LONG = 1000  # new tokens: a request for more is told how to stop it


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
    check_model_folder(p, "", args.model)  # names a missing config.json or tokenizer
    if args.show_gate and saved_config(args.model).get("use_pointer") is False:
        p.error(f"--show_gate: the model in {args.model} has no pointer (use_pointer=False)")
    return args


if __name__ == "__main__":  # a mistaken command line fails here, before the imports below (torch: 8-40 s)
    parse_args()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402
from transformers import set_seed  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

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


def shown(prompt: str, text: str) -> str:
    """A sample's line: the prompt, then the text its continuation adds (the decoder starts every word with a space:
    none after a prompt that ends in one), without the line break of a final <eos>."""
    return prompt + (text.removeprefix(" ") if prompt[-1:].isspace() else text).rstrip("\n")


class LineStream(BaseStreamer):
    """generate's streamer for one sample: its line, `line(new tokens)`, written to stdout as far as it has grown
    (a prefix of the tokens decodes to a prefix of the text: tokenization_pointer_sentinel) and ended at generate's
    end. Where a tokenizer's text changes behind its end, the rest waits; the end writes the line whole. The line is
    decoded whole, so once that takes long (thousands of tokens) it is decoded at most a fifth of the time, not at
    every token: a long request slows by a fifth at most, not quadratically."""

    def __init__(self, line):
        self.line, self.new, self.written, self.prompt, self.next = line, [], "", True, 0.0

    def put(self, value):
        if not self.prompt:  # generate's first put is the prompt, whose line is the prompt alone
            self.new += value.flatten().tolist()
        self.prompt = False
        if (start := time.monotonic()) < self.next:
            return
        text = self.line(self.new)
        self.next = time.monotonic() + 4 * (time.monotonic() - start)
        if text.startswith(self.written):
            self.write(text[len(self.written) :], text)

    def write(self, more: str, text: str):
        sys.stdout.write(more)
        sys.stdout.flush()
        self.written = text

    def end(self):
        text = self.line(self.new)
        self.write(text[len(self.written) :] if text.startswith(self.written) else "\n" + text, text)
        self.stop()

    def stop(self):
        """End the line written so far (at the end, or on Ctrl+C)."""
        if self.written:
            print(flush=True)
        self.written = ""


class StepBar(BaseStreamer):
    """generate's streamer for several samples at once (TextStreamer's kind takes one): a progress bar of the steps
    on stderr, shown once generation has taken 2 s."""

    def __init__(self, total: int):
        self.bar, self.prompt = tqdm(total=total, desc="generating", unit="tok", delay=2), True

    def put(self, value):
        if not self.prompt:  # generate's first put is the prompt
            self.bar.update(1)
        self.prompt = False

    def end(self):
        self.bar.close()

    stop = end


def how_to_stop(max_new_tokens: int):
    """A long request is told on stderr how to stop it (it may run for minutes)."""
    if max_new_tokens > LONG:
        print(f"generating up to {max_new_tokens:,} new tokens; Ctrl+C stops it", file=sys.stderr, flush=True)


def main(argv=None):
    args = parse_args(argv)
    set_seed(args.seed)
    tok = load_saved_tokenizer(args.model)  # the prompt is checked before the weights load
    # Every training line follows an <eos>: the prompt starts a line (from the zero state without one, the PTB pointer
    # model ends the line at once). Its words the vocabulary lacks are placeholders the pointer can copy.
    enc = tok(args.prompt or "", add_special_tokens=False)
    table = enc.oov_words[0] if getattr(enc, "oov_words", None) else None
    prompt_ids, eos = enc["input_ids"], tok.eos_token_id
    if args.prompt is not None and not prompt_ids:
        fail(BLANK)  # text the rules drop whole (PTB's punctuation)
    tok, model = load_saved_model(args.model, tok)
    ids = torch.tensor([prompt_ids if prompt_ids[:1] == [eos] else [eos, *prompt_ids]])
    prompt = args.prompt or ""

    def line(new: list[int]) -> str:  # up to the first <eos>, as the folder's pipeline writes it
        new = new[: new.index(eos) + 1] if eos in new else new
        return shown(prompt, continuation(tok, ids[0].tolist(), new, table))

    # One sample is written as it comes; several get a progress bar; beam search takes no streamer. Without beams,
    # sampling stops at the <eos> that ends every sample (a shipped folder's generation config has none, so that its
    # pipeline writes on past line ends): the same text, without the wait for --max_new_tokens.
    one = args.num_return_sequences == 1 and args.num_beams == 1
    streamer = LineStream(line) if one else StepBar(args.max_new_tokens) if args.num_beams == 1 else None
    stop = {"eos_token_id": eos} if args.num_beams == 1 else {}  # beam search ranks finished beams: left as it was
    how_to_stop(args.max_new_tokens)
    try:
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
            streamer=streamer,
            **stop,
        )
    except ValueError as e:  # generate's checks of its settings (beam search's memory for --max_new_tokens)
        fail(e)
    except KeyboardInterrupt:
        if streamer is not None:
            streamer.stop()  # the line written so far ends, then ctrl_c_stops says why
        raise
    for seq in out:
        new = until_eos(seq[ids.shape[1] :], tok.eos_token_id)
        if not one:
            print(line(new.tolist()))
        if args.show_gate:
            gate, share = pointer_shares(model, seq, ids.shape[1], len(new))
            for word, g, s in zip(tok.convert_ids_to_tokens(new.tolist()), gate.tolist(), share.tolist(), strict=True):
                print(f"  {word:>15s}  from_pointer={s:.3f}  g={g:.3f}")


if __name__ == "__main__":
    with ctrl_c_stops():
        main()
