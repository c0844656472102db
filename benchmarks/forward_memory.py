"""Peak memory of one forward over N tokens at batch 1 (what lm-evaluation-harness's HFLM does per window: one call
`model(ids).logits` over up to max_length tokens), for the 2x200 model with PTB's and WikiText-2's vocabulary.

    python benchmarks/forward_memory.py 2048 8192 32768

Each (vocabulary, N) runs in a fresh process; the figure is the rise of the process's peak resident memory over the
forward (CPU, float32, random weights: memory does not depend on them).
"""

import json
import subprocess
import sys

CHILD = """
import json, resource, sys, time, torch
sys.path.insert(0, {root!r})
from modeling_pointer_sentinel import PointerSentinelConfig, PointerSentinelForCausalLM
V, N = {v}, {n}
torch.manual_seed(0)
model = PointerSentinelForCausalLM(PointerSentinelConfig(vocab_size=V, embedding_size=200, hidden_size=200,
    num_layers=2, tie_word_embeddings=True, pointer_window=100, eos_token_id=0)).eval()
ids = torch.randint(V, (1, N))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
with torch.no_grad():
    logits = model(ids).logits
print(json.dumps({{"peak_rise_MB": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024,
                  "seconds": time.perf_counter() - t, "logits_MB": logits.numel() * 4 / 2**20}}))
"""


def main(ns):
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    for name, v in (("ptb", 10_000), ("wt2", 33_278)):
        for n in ns:
            done = subprocess.run([sys.executable, "-c", CHILD.format(root=root, v=v, n=n)], capture_output=True,
                                  text=True, check=True)  # fmt: skip
            print(json.dumps({"vocab": name, "tokens": n, **json.loads(done.stdout.splitlines()[-1])}), flush=True)


if __name__ == "__main__":
    main([int(n) for n in sys.argv[1:]] or [2048, 8192, 32768])
