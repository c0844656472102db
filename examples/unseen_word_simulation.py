"""What `simulate_unseen_words` makes of WikiText-2's training split, before and after slots were given as text runs.

    python examples/unseen_word_simulation.py --output results/open_vocabulary/unseen_word_simulation_wt2.json

With the flags of examples/configs/wt2_copy_unseen.json (rate 1.0, max count 1000, block 1000, 256 slots) and the
pointer window of the model it fine-tunes (L = 100), on the bundled training split as train.py encodes it:
- qualifying: the share of tokens whose word is seen at most max_count times (what rate 1.0 should rename);
- effective rate: the share of qualifying tokens written as placeholders (and of all tokens);
- by block position quartile (0-249, 250-499, 500-749, 750-999): the share of tokens written as placeholders;
- windows (every L consecutive tokens; those crossing a block boundary apart) that hold one word under two slots, one
  slot for two words, or a word both as itself and as a placeholder.
"before" is the function as it was at commit 8ed2c28 (`before`, kept here verbatim): a cap of oov_slots // 2 words per
block, in first-occurrence order. "after" is simulate_unseen_words given the window; "after_without_window" is it
given the block (1000) as the window, as train.py passed it before it passed the model's pointer_window.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CONFIG = ROOT / "examples" / "configs" / "wt2_copy_unseen.json"


def before(ids, vocab_size: int, oov_slots: int, rate: float, max_count: int = 10, block: int = 1000, seed: int = 0):
    """simulate_unseen_words at commit 8ed2c28."""
    import torch

    if not 0 <= rate <= 1 or block < 1 or oov_slots < 2:
        raise ValueError(f"Need 0 <= rate <= 1, block >= 1 and oov_slots >= 2; got {rate}, {block} and {oov_slots}.")
    rare = torch.bincount(ids, minlength=vocab_size) <= max_count
    g, out, slot = torch.Generator().manual_seed(seed), ids.clone(), 0
    for s in range(0, ids.numel(), block):
        part = ids[s : s + block]
        words = torch.tensor(list(dict.fromkeys(part[rare[part]].tolist())), dtype=ids.dtype)  # first occurrence order
        chosen = words[torch.rand(words.numel(), generator=g) < rate][: oov_slots // 2]
        for k, word in enumerate(chosen.tolist()):
            out[s : s + block][part == word] = vocab_size + (slot + k) % oov_slots
        slot = (slot + chosen.numel()) % oov_slots
    return out


def bad_windows(n: int, window: int, first, second):
    """Whether each window (start s: positions s..s+window-1, s in 0..n-window) holds some pair of positions
    first[i] < second[i]: a 0/1 numpy array."""
    import numpy as np

    lo, hi = np.maximum(second - window + 1, 0), np.minimum(first, n - window)  # the starts of windows holding both
    keep = lo <= hi
    marks = np.zeros(n - window + 2, dtype=np.int64)
    np.add.at(marks, lo[keep], 1)
    np.add.at(marks, hi[keep] + 1, -1)
    return np.cumsum(marks)[: n - window + 1] > 0


def pairs(keys, values, positions):
    """Consecutive occurrences (by position) of each key, whose values differ: (earlier, later) positions."""
    import numpy as np

    order = np.lexsort((positions, keys))
    k, v, p = keys[order], values[order], positions[order]
    same = (k[1:] == k[:-1]) & (v[1:] != v[:-1])
    return p[:-1][same], p[1:][same]


def unseen_word_stats(ids, out, vocab_size: int, max_count: int, block: int, window: int) -> dict:
    """The figures in the module docstring for `out`, the simulation of `ids`."""
    import numpy as np

    ids, out = np.asarray(ids), np.asarray(out)
    n = ids.size
    qualifying = np.bincount(ids, minlength=vocab_size)[ids] <= max_count
    renamed = out >= vocab_size
    where = np.arange(n) % block
    quartiles = {}
    for q in range(4):
        at = (where >= q * block // 4) & (where < (q + 1) * block // 4)
        quartiles[f"{q * block // 4}-{(q + 1) * block // 4 - 1}"] = {
            "placeholders": float(renamed[at].mean()),
            "of_qualifying": float(renamed[at & qualifying].sum() / (at & qualifying).sum()),
        }
    p = np.flatnonzero(renamed)
    q = np.flatnonzero(qualifying)
    flags = {
        "word_under_two_slots": bad_windows(n, window, *pairs(ids[p], out[p], p)),
        "slot_for_two_words": bad_windows(n, window, *pairs(out[p], ids[p], p)),
        "word_as_itself_and_placeholder": bad_windows(n, window, *pairs(ids[q], renamed[q], q)),
    }
    starts = np.arange(n - window + 1)
    crossing = starts // block != (starts + window - 1) // block
    return {
        "tokens": int(n),
        "qualifying": float(qualifying.mean()),
        "placeholders": float(renamed.mean()),
        "effective_rate": float(renamed.sum() / qualifying.sum()),
        "by_block_position": quartiles,
        "windows": int(starts.size),
        "windows_crossing_a_block_boundary": int(crossing.sum()),
        **{
            f"windows_with_{k}": {"all": float(v.mean()), "crossing": float(v[crossing].mean())}
            for k, v in flags.items()
        },
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--window", type=int, default=100, help="the pointer window L (the WT2 pointer folder's: 100)")
    p.add_argument("--output", help="write the figures as JSON here")
    args = p.parse_args(argv)
    if args.window < 1:
        p.error(f"--window must be a positive integer, got {args.window}")
    import torch
    from transformers import AutoTokenizer

    from modeling_pointer_sentinel.training import BUNDLED, encode_lines, simulate_unseen_words

    torch.set_num_threads(1)
    flags = json.loads(CONFIG.read_text())
    folder = ROOT / flags["model_name_or_path"]
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    config = json.loads((folder / "config.json").read_text())
    import lzma

    ids = encode_lines(tok, lzma.open(BUNDLED / "wiki.train.tokens.xz", "rt").read().splitlines())
    v, slots = config["vocab_size"], config["oov_slots"]
    rate, max_count, block = flags["unseen_word_rate"], flags["unseen_word_max_count"], flags["unseen_word_block"]
    runs = {
        "before": before(ids, v, slots, rate, max_count, block),
        "after": simulate_unseen_words(ids, v, slots, rate, max_count, block, window=args.window),
        # the call as train.py makes it until it passes window=cfg.pointer_window: the block is the window (safe side)
        "after_without_window": simulate_unseen_words(ids, v, slots, rate, max_count, block, window=block),
    }
    result = {
        "command": "python examples/unseen_word_simulation.py"
        + (f" --window {args.window}" * (args.window != 100))
        + (f" --output {args.output}" if args.output else ""),
        "flags": {"rate": rate, "max_count": max_count, "block": block, "oov_slots": slots, "window": args.window},
        **{k: unseen_word_stats(ids.numpy(), o.numpy(), v, max_count, block, args.window) for k, o in runs.items()},
    }
    print(json.dumps(result, indent=1))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
