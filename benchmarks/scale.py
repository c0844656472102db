"""Scale of the token cache (modeling_pointer_sentinel/data.py) on synthetic corpora: Zipf-distributed words.

    python benchmarks/scale.py --tokens 10e6 100e6 --work /tmp/scale   # writes a markdown table to stdout

For each size: the corpus is generated (`generate`), then a child process prepares it (streamed vocabulary, then
the id file) and reports its wall time and peak RSS; a second child starts again on the same cache (the tokenizer
and the ids read back, as a second start of examples/train.py does before its first step) and reports the same.
Each child is one process; the tokenizer's batch encode may use both cores.
"""

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parents[1]


def generate(path: Path, tokens: int, vocab: int = 100_000, exponent: float = 1.1, seed: int = 0):
    """`tokens` words (line breaks not counted) drawn from a Zipf law over `vocab` words, 5 to 35 words a line."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** exponent
    cdf = np.cumsum(p / p.sum())
    words = np.array([f"w{i}" for i in range(vocab)], dtype=object)
    chunk = 5_000_000
    with open(path, "w") as f, tqdm(total=tokens, unit="tok", desc=f"generating {path.name}") as bar:
        for start in range(0, tokens, chunk):
            n = min(chunk, tokens - start)
            ids = np.minimum(np.searchsorted(cdf, rng.random(n)), vocab - 1)
            ends = np.cumsum(rng.integers(5, 36, size=n // 5 + 1))
            ends = ends[ends < n]
            parts = np.split(words[ids], ends)
            f.write("\n".join(" ".join(part) for part in parts) + "\n")
            bar.update(n)


CHILD = """
import json, resource, sys, time
t = time.time()
from modeling_pointer_sentinel.data import TextSource, cached_word_level_tokenizer, load_ids, read_meta, token_file
imports, t = time.time() - t, time.time()
source, cache = TextSource(path=sys.argv[1]), sys.argv[2]
tok = cached_word_level_tokenizer(source, cache)
t_vocab = time.time() - t
path = token_file(tok, source, cache)
t_prep = time.time() - t
ids = load_ids(path)
out = {"seconds": time.time() - t, "prep_seconds": t_prep, "vocab_seconds": t_vocab, "import_seconds": imports,
       "tokens": ids.numel(), "vocab": len(tok), "dtype": read_meta(path)["dtype"], "bytes": path.stat().st_size,
       "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
print(json.dumps(out))
"""


def child(corpus: Path, cache: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(corpus), str(cache)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=float, nargs="+", default=[10e6])
    ap.add_argument("--work", default="/tmp/pointer_sentinel_scale", help="corpora and caches (deleted after)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in map(int, args.tokens):
        corpus, cache = work / f"zipf_{n}.txt", work / f"cache_{n}"
        shutil.rmtree(cache, ignore_errors=True)
        generate(corpus, n)
        first, second = child(corpus, cache), child(corpus, cache)
        rows.append((n, corpus.stat().st_size, first, second))
        print(json.dumps({"tokens": n, "first": first, "second": second}), file=sys.stderr)
        if not args.keep:
            corpus.unlink()
            shutil.rmtree(cache)
    print(
        "| words (+ line ends) | text | vocabulary | prep: vocabulary + ids | encode tok/s | prep peak RSS "
        "| id file | second start: data ready (+ imports) | second start peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n, size, a, b in rows:
        encode = a["prep_seconds"] - a["vocab_seconds"]
        print(
            f"| {n / 1e6:,.0f}M ({a['tokens'] / 1e6:,.1f}M) | {size / 2**20:,.0f} MiB | {a['vocab']:,} "
            f"| {a['vocab_seconds']:,.1f} + {encode:,.1f} s | {a['tokens'] / encode / 1e6:,.2f}M "
            f"| {a['peak_rss_mb']:,.0f} MB | {a['bytes'] / 2**20:,.0f} MiB {a['dtype']} "
            f"| {b['seconds']:,.1f} s (+ {b['import_seconds']:,.1f} s) | {b['peak_rss_mb']:,.0f} MB |"
        )


if __name__ == "__main__":
    main()
