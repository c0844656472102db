"""Sample from a saved Pointer Sentinel-LSTM.

    python examples/generate.py outputs/quickstart --prompt "the company said" --max_new_tokens 30 --do_sample \
        --temperature 0.8 --top_k 50 --seed 0 --show_gate
"""

import argparse
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
import modeling_pointer_sentinel  # noqa: E402,F401  (registers the Auto classes)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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

    set_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
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
        new = seq[ids.shape[1] :]
        print((args.prompt + tok.decode(new)).strip())
        if args.show_gate and model.config.use_pointer:
            with torch.no_grad():  # g at position t weighs the prediction of token t+1
                gate = model(seq[None, :-1]).gate[0, ids.shape[1] - 1 :]
            for word, g in zip(tok.convert_ids_to_tokens(new.tolist()), gate.tolist(), strict=True):
                print(f"  {word:>15s}  g={g:.3f}  pointer={1 - g:.3f}")


if __name__ == "__main__":
    main()
