"""Scale of the token cache (modeling_pointer_sentinel/data.py) and of training on it, on synthetic corpora: Zipf words.

    python benchmarks/scale.py --tokens 10e6 100e6 --work /tmp/scale          # markdown tables on stdout
    python benchmarks/scale.py --tokens 1e9 --skip_training --work /tmp/scale  # prep and second start only
    python benchmarks/scale.py --rules_file wiki.train.tokens --text_rules wikitext  # a real corpus's encode pass

For each size, with the corpus generated (`generate`; a file already at WORK/zipf_N.txt is used as it is):
- prep: a child process builds the vocabulary (streamed) and the id file (`token_file`, `--num_proc` workers); it
  reports its wall and CPU time, the encode pass's own time, and its peak RSS (ru_maxrss of the child, and the largest
  of its workers'). Nothing else runs in the child: the ids are not loaded.
- second start: examples/train.py on the same cache (`--max_train_steps 2 --log_every 1`, a small model): the time
  from its launch to its first training step (the first line of log.jsonl, written after step 1) and the run's peak
  RSS (ru_maxrss of that process).
- training tokens/s (unless --skip_training): examples/train.py on the cache for `--train_steps` steps, one process
  (`--num_threads 1`) and two gloo ranks (`accelerate launch --multi_gpu --num_processes 2 ... --cpu`, one thread a
  rank); targets per second over all ranks as train.py logs them (from the epoch's start to the last step), and the
  scaling efficiency (2-rank rate / (2 x 1-rank rate)).
While a time is taken, the processes listed in --pause_pids (one PID a line, if the file exists) are stopped with
SIGSTOP and continued with SIGCONT after it, whatever happens.

Scoring at scale (`--evaluate MODEL`): examples/evaluate.py on a text of N targets made here from a corpus's lines (by
default the bundled WikiText-2 training text, repeated; written to --work and deleted after), one process under
`nice -n 5`, `--num_threads 1`, its own token cache: its peak RSS (ru_maxrss of that process, tokenisation of the
text and the reading of the model included) and targets per second of the scoring (evaluate.py's `seconds`).
`--evaluate small` scores with a small model of this package made here in --work (1 layer of 32 units, pointer
window 20, no adaptive softmax, a 200-word vocabulary built from the corpus: everything else read as <unk>), fast
enough for 100M targets on one core; its figures mean nothing, its memory is what is measured. `--evaluate
small_speller`: the same with a speller (32 units; `oov_slots` 32 and the pointer's head for spelled words) and a
1,000-word vocabulary, so that the text spells the words outside it (30% of WikiText-2's) and evaluate.py takes its
spelled path (bits per byte); its targets are the text's ids, spelled words' bytes and `</w>` included. The shipped
folders' spelled forward was too slow for these sizes (WikiText-2's test split took about an hour before the spelled
mixture by scatter; not measured since).

    python benchmarks/scale.py --evaluate pretrained/wt2-pointer-sentinel-lstm-2x200 --targets 1e6 10e6
    python benchmarks/scale.py --evaluate small --targets 1e6 10e6 100e6 --eval_batch_size 100
    python benchmarks/scale.py --evaluate small_speller --targets 1e6 10e6
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parents[1]
MODEL = {"embedding_size": 64, "hidden_size": 64, "num_layers": 1, "pointer_window": 20,
         "adaptive_softmax_cutoffs": [2000, 20000]}  # fmt: skip


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


PREP = """
import json, resource, sys, time
t0, c0 = time.time(), time.process_time()
from modeling_pointer_sentinel.data import TextSource, cached_word_level_tokenizer, read_meta, token_file
imports = time.time() - t0
source, cache, workers = TextSource(path=sys.argv[1]), sys.argv[2], int(sys.argv[3])
t = time.time()
tok = cached_word_level_tokenizer(source, cache, text_rules="auto", max_vocab_size=None, min_frequency=1)  # train.py's
t_vocab, t = time.time() - t, time.time()
path = token_file(tok, source, cache, progress=False, num_proc=workers)
t_encode = time.time() - t
meta = read_meta(path)
print(json.dumps({"seconds": time.time() - t0, "cpu_seconds": time.process_time() - c0, "import_seconds": imports,
                  "vocab_seconds": t_vocab, "encode_seconds": t_encode, "tokens": meta["tokens"], "vocab": len(tok),
                  "dtype": meta["dtype"], "bytes": path.stat().st_size,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "workers_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


@contextmanager
def paused(pid_file: Path | None):
    """The processes listed in `pid_file` stopped (SIGSTOP) while the block runs, continued after it, always."""
    pids = []
    if pid_file and pid_file.is_file():
        pids = [int(line) for line in pid_file.read_text().split() if line.strip().isdigit()]
    stopped = []
    try:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            except ProcessLookupError:
                pass
        yield stopped
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def env(threads: int = 1) -> dict:
    keep = ("PATH", "HOME", "HF_HOME", "HF_DATASETS_CACHE", "TMPDIR")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, "OMP_NUM_THREADS": str(threads),
            "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def prep(corpus: Path, cache: Path, workers: int) -> dict:
    out = subprocess.run([sys.executable, "-c", PREP, str(corpus), str(cache), str(workers)], cwd=ROOT, check=True,
                         stdout=subprocess.PIPE, text=True, env=env())  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def train_command(corpus: Path, cache: Path, out: Path, steps: int, processes: int, log_every: int,
                  batch: int = 20) -> list[str]:  # fmt: skip
    config = out.with_suffix(".json")
    config.write_text(json.dumps({"model": MODEL, "bptt": 35, "per_device_train_batch_size": batch // processes}))
    args = [str(ROOT / "examples" / "train.py"), "--train_file", str(corpus), "--data_cache_dir", str(cache),
            "--config", str(config), "--output_dir", str(out), "--max_train_steps", str(steps), "--log_every",
            str(log_every), "--num_threads", "1", "--optimizer", "sgd", "--learning_rate", "1"]  # fmt: skip
    if processes == 1:
        return [sys.executable, *args]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", *args, "--cpu"]  # fmt: skip


def second_start(corpus: Path, cache: Path, work: Path) -> dict:
    """examples/train.py on the filled cache: seconds from launch to its first logged training step; peak RSS."""
    out = work / "second_start"
    shutil.rmtree(out, ignore_errors=True)
    log = out / "log.jsonl"
    before = sorted(p.name for p in cache.iterdir())
    start = time.perf_counter()
    proc = subprocess.Popen(train_command(corpus, cache, out, 2, 1, 1), cwd=ROOT, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    first, status = None, 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # this child's own peak RSS, not earlier children's
        if first is None and log.is_file() and log.stat().st_size:
            first = time.perf_counter() - start
        if pid:
            break
        time.sleep(0.02)
    if status:
        raise RuntimeError(proc.stderr.read()[-3000:])
    if first is None:
        first = time.perf_counter() - start  # ended before a poll saw the log: the whole run is the bound
    rss = usage.ru_maxrss / 1024
    if (after := sorted(p.name for p in cache.iterdir())) != before:  # a second start prepares nothing
        raise RuntimeError(f"train.py prepared {sorted(set(after) - set(before))}: not a second start")
    return {"first_step_seconds": first, "exit_seconds": time.perf_counter() - start, "peak_rss_mb": rss}


def training_rate(corpus: Path, cache: Path, work: Path, processes: int, steps: int, batch: int = 20) -> dict:
    out = work / f"train_{processes}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = train_command(corpus, cache, out, steps, processes, steps, batch)
    done = subprocess.run(cmd, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    last = [r for r in rows if "targets_per_s" in r][-1]
    return {"targets_per_s": last["targets_per_s"], "step": last["step"], "world_size": last["world_size"]}


RULES = """
import sys, tempfile, time
from modeling_pointer_sentinel import data
from modeling_pointer_sentinel.data import TextSource, cached_word_level_tokenizer, read_meta, token_file
data.MIN_RANGE_BYTES = 1 << 20  # a file of a few MB in as many ranges as workers
source, rules, workers = TextSource(path=sys.argv[1]), sys.argv[2], int(sys.argv[3])
with tempfile.TemporaryDirectory() as d:
    tok = cached_word_level_tokenizer(source, d, text_rules=rules)
    t = time.perf_counter()
    path = token_file(tok, source, d, progress=False, num_proc=workers)
    print(read_meta(path)["tokens"], time.perf_counter() - t)
"""


def rules_throughput(path: str, rules: str, pids: Path, repeats: int = 2):
    """The encode pass alone over a real corpus file under its text rules, 1 and 2 workers: one table row each."""
    print(f"\n| {Path(path).name}, text rules {rules} | tokens | encode s | tok/s | load average |")
    print("|---|---|---|---|---|")
    for workers in [1, 2] * repeats:
        with paused(pids):
            avg = load()
            out = subprocess.run([sys.executable, "-c", RULES, path, rules, str(workers)], cwd=ROOT, check=True,
                                 stdout=subprocess.PIPE, text=True, env=env())  # fmt: skip
        tokens, seconds = out.stdout.split()
        tokens, seconds = int(tokens), float(seconds)
        print(f"| {workers} worker(s) | {tokens:,} | {seconds:.2f} | {tokens / seconds / 1e6:.2f}M "
              f"| {avg.removeprefix('load average ')} |")  # fmt: skip


MAP = """
import sys, tempfile, time
import numpy as np
import datasets
from modeling_pointer_sentinel.data import TextSource, _Encoder, cached_word_level_tokenizer, read_meta, token_file
path, workers = sys.argv[1], int(sys.argv[2])
source = TextSource(path=path)
with tempfile.TemporaryDirectory() as d:
    tok = cached_word_level_tokenizer(source, d, text_rules="auto", max_vocab_size=None, min_frequency=1)
    t = time.perf_counter()
    ours = token_file(tok, source, d + "/ours", progress=False, num_proc=workers)
    t_ours = time.perf_counter() - t
    encoder = _Encoder(tok, np.uint32)
    t = time.perf_counter()
    ds = datasets.load_dataset("text", data_files=path, cache_dir=d + "/hf", split="train")  # the text as Arrow
    t_arrow, t = time.perf_counter() - t, time.perf_counter()
    ids = ds.map(lambda b: {"ids": [encoder.lines(b["text"])]}, batched=True, batch_size=100_000, num_proc=workers,
                 remove_columns=["text"])  # one row of ids per batch of lines
    t_map, t = time.perf_counter() - t, time.perf_counter()
    with open(d + "/theirs.bin", "wb") as f:  # the flat id file training reads
        for batch in ids.with_format("numpy").iter(batch_size=1):
            np.asarray(batch["ids"][0], np.uint32).tofile(f)
    t_flat = time.perf_counter() - t
    same = np.array_equal(np.fromfile(d + "/theirs.bin", np.uint32), np.fromfile(ours, read_meta(ours)["dtype"]))
    print(read_meta(ours)["tokens"], t_ours, t_arrow, t_map, t_flat, same)
"""


def datasets_map(path: str, workers: int, pids: Path):
    """token_file's byte-range workers against `datasets`' text loader + `map(num_proc=workers)` + a flat file, on
    the same file and vocabulary, one table row."""
    with paused(pids):
        avg = load()
        out = subprocess.run([sys.executable, "-c", MAP, path, str(workers)], cwd=ROOT, check=True,
                             stdout=subprocess.PIPE, text=True, env=env())  # fmt: skip
    tokens, ours, arrow, mapped, flat, same = out.stdout.split()
    ours, arrow, mapped, flat = map(float, (ours, arrow, mapped, flat))
    print("| tokens | workers | token_file | datasets: text to Arrow + map + flat file | same ids | load average |")
    print("|---|---|---|---|---|---|")
    print(f"| {int(tokens):,} | {workers} | {ours:.1f} s | {arrow:.1f} + {mapped:.1f} + {flat:.1f} = "
          f"{arrow + mapped + flat:.1f} s | {same} | {avg.removeprefix('load average ')} |")  # fmt: skip


WIKITEXT2_TRAIN = ROOT / "modeling_pointer_sentinel" / "data" / "wikitext-2" / "wiki.train.tokens.xz"

SMALL = """
import sys, torch
from modeling_pointer_sentinel import PointerSentinelConfig, PointerSentinelForCausalLM
from modeling_pointer_sentinel.data import TextSource
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer
corpus, out = sys.argv[1], sys.argv[2]
tok = build_word_level_tokenizer(TextSource(path=corpus).lines(), max_vocab_size=200, text_rules="wikitext")
config = PointerSentinelConfig(vocab_size=len(tok), embedding_size=32, hidden_size=32, num_layers=1, pointer_window=20,
                               unk_token_id=tok.convert_tokens_to_ids("<unk>"), eos_token_id=tok.eos_token_id)
torch.manual_seed(0)
PointerSentinelForCausalLM(config).save_pretrained(out)
tok.save_pretrained(out)
"""


SMALL_SPELLER = """
import sys, numpy as np, torch
from modeling_pointer_sentinel import PointerSentinelConfig, PointerSentinelForCausalLM
from modeling_pointer_sentinel.data import TextSource
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, spelling_vocabulary
from modeling_pointer_sentinel.training import encode_lines
corpus, out, line_ids = sys.argv[1], sys.argv[2], sys.argv[3]
lines = list(TextSource(path=corpus).lines())
tok = spelling_vocabulary(build_word_level_tokenizer(lines, max_vocab_size=1000, text_rules="wikitext"))
config = PointerSentinelConfig(vocab_size=tok.word_vocab_size, embedding_size=32, hidden_size=32, num_layers=1,
                               pointer_window=20, oov_slots=32, oov_pointer=True, speller_size=32,
                               unk_token_id=tok.unk_token_id, eos_token_id=tok.eos_token_id,
                               pad_token_id=tok.eos_token_id)
torch.manual_seed(0)
PointerSentinelForCausalLM(config).save_pretrained(out)
tok.save_pretrained(out)
np.save(line_ids, [len(encode_lines(tok, [line])) for line in lines])  # each line's ids, spelled words' bytes too
"""


def repeated_text(path: Path, corpus: Path, targets: int, counts: list[int] | None = None) -> int:
    """`corpus`'s lines again and again into `path` until they hold `targets` + 1 tokens (`counts`: each line's; by
    default its words and its line end, as the word-level tokenizers read them); returns the tokens written."""
    from modeling_pointer_sentinel.data import TextSource

    lines = list(TextSource(path=str(corpus)).lines())
    counts = [len(line.split()) + 1 for line in lines] if counts is None else counts
    written = 0
    with open(path, "w") as f, tqdm(total=targets + 1, unit="tok", desc=f"writing {path.name}") as bar:
        while written < targets + 1:
            for line, n in zip(lines, counts, strict=True):
                f.write(line + "\n")
                written += n
                bar.update(n)
                if written >= targets + 1:
                    break
    return written


def evaluate_at_scale(model: str, sizes: list[int], work: Path, corpus: Path, batch_size: int, pids: Path, keep: bool):
    """examples/evaluate.py on texts of each size: one table row each (peak RSS, targets/s)."""
    work.mkdir(parents=True, exist_ok=True)
    counts = None
    if model == "small":
        folder = work / "small_model"
        subprocess.run([sys.executable, "-c", SMALL, str(corpus), str(folder)], cwd=ROOT, check=True, env=env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        model = str(folder)
    elif model == "small_speller":
        folder, line_ids = work / "small_speller", work / "small_speller_line_ids.npy"
        subprocess.run([sys.executable, "-c", SMALL_SPELLER, str(corpus), str(folder), str(line_ids)], cwd=ROOT,
                       check=True, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        model, counts = str(folder), np.load(line_ids).tolist()
    rows = []
    for n in sizes:
        text, cache, out = work / f"text_{n}.txt", work / f"eval_cache_{n}", work / f"eval_{n}.json"
        tokens = repeated_text(text, corpus, n, counts)
        cmd = ["nice", "-n", "5", sys.executable, str(ROOT / "examples" / "evaluate.py"), model, "--test_file",
               str(text), "--num_threads", "1", "--batch_size", str(batch_size), "--data_cache_dir", str(cache),
               "--output_json", str(out)]  # fmt: skip
        log = work / f"eval_{n}.log"  # its progress bars: a pipe nobody reads while it runs would fill and block it
        with paused(pids) as stopped, open(log, "w") as err:
            avg, start = load(), time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
            wall = time.perf_counter() - start
        if status:
            raise RuntimeError(log.read_text()[-3000:])
        res = json.loads(out.read_text())
        row = {"targets_asked": n, "tokens_written": tokens, "text_bytes": text.stat().st_size,
               "targets": res["tokens"], "ppl": res["ppl"], "scoring_seconds": res["seconds"], "wall_seconds": wall,
               "peak_rss_mb": usage.ru_maxrss / 1024, "load": avg, "paused": len(stopped)}  # fmt: skip
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
        if not keep:
            text.unlink()
            shutil.rmtree(cache)
            out.unlink()
            log.unlink()
    print(
        f"\n| {Path(model).name}: targets | text | peak RSS | scoring targets/s | scoring s | wall s | load average |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['targets']:,} | {r['text_bytes'] / 2**20:,.0f} MiB | {r['peak_rss_mb']:,.0f} MB "
              f"| {r['targets'] / r['scoring_seconds']:,.0f} | {r['scoring_seconds']:,.0f} | {r['wall_seconds']:,.0f} "
              f"| {r['load'].removeprefix('load average ')} |")  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=float, nargs="+", default=[10e6])
    ap.add_argument("--work", default="/tmp/pointer_sentinel_scale", help="corpora and caches (deleted after)")
    ap.add_argument("--num_proc", type=int, default=2, help="token cache workers")
    ap.add_argument("--train_steps", type=int, default=40)
    ap.add_argument("--global_batch", type=int, default=20, help="training streams over all ranks (even)")
    ap.add_argument("--skip_training", action="store_true", help="prep and second start only")
    ap.add_argument("--pause_pids", default="/tmp/pause_pids", help="PIDs to stop while a time is taken")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--prep_unpaused", action="store_true", help="leave --pause_pids running during prep (1B: ~11 min)")
    ap.add_argument("--rules_file", help="instead: the encode pass over this file under --text_rules, 1 and 2 workers")
    ap.add_argument("--text_rules", default="wikitext")
    ap.add_argument("--datasets_map", help="instead: this file through token_file and through datasets' map")
    ap.add_argument("--evaluate", help="instead: examples/evaluate.py with this model folder ('small', "
                    "'small_speller': one made here) on texts of --targets targets")  # fmt: skip
    ap.add_argument("--targets", type=float, nargs="+", default=[1e6, 10e6])
    ap.add_argument("--eval_corpus", default=str(WIKITEXT2_TRAIN), help="--evaluate's text: these lines, repeated")
    ap.add_argument("--eval_batch_size", type=int, default=10)
    args = ap.parse_args()
    work, pids = Path(args.work), Path(args.pause_pids)
    if args.evaluate:
        return evaluate_at_scale(args.evaluate, [int(n) for n in args.targets], work, Path(args.eval_corpus),
                                 args.eval_batch_size, pids, args.keep)  # fmt: skip
    if args.rules_file:
        return rules_throughput(args.rules_file, args.text_rules, pids)
    if args.datasets_map:
        return datasets_map(args.datasets_map, args.num_proc, pids)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in map(int, args.tokens):
        corpus, cache = work / f"zipf_{n}.txt", work / f"cache_{n}"
        shutil.rmtree(cache, ignore_errors=True)
        if not corpus.is_file():
            generate(corpus, n)
        row = {"tokens_asked": n, "text_bytes": corpus.stat().st_size}
        with paused(None if args.prep_unpaused else pids) as stopped:
            row["prep_load"] = load()
            row["prep"] = prep(corpus, cache, args.num_proc)
            row["paused"] = len(stopped)
        print(json.dumps(row), file=sys.stderr, flush=True)
        with paused(pids):
            row["start_load"] = load()
            row["second_start"] = second_start(corpus, cache, work)
        print(json.dumps(row), file=sys.stderr, flush=True)
        if not args.skip_training:
            for processes in (1, 2):
                with paused(pids):
                    row[f"train_load_{processes}"] = load()
                    row[f"train_{processes}"] = training_rate(corpus, cache, work, processes, args.train_steps,
                                                                args.global_batch)  # fmt: skip
                print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
        if not args.keep:
            corpus.unlink()
            shutil.rmtree(cache)
    print(
        "| words (+ line ends) | text | vocabulary | id file | prep: vocabulary + ids (wall) | encode tok/s "
        "| prep peak RSS: process / worker | second start: first step | second start peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p, s = r["prep"], r["second_start"]
        print(
            f"| {r['tokens_asked'] / 1e6:,.0f}M ({p['tokens'] / 1e6:,.1f}M) | {r['text_bytes'] / 2**20:,.0f} MiB "
            f"| {p['vocab']:,} | {p['bytes'] / 2**20:,.0f} MiB {p['dtype']} "
            f"| {p['vocab_seconds']:,.1f} + {p['encode_seconds']:,.1f} s "
            f"| {p['tokens'] / p['encode_seconds'] / 1e6:,.2f}M "
            f"| {p['peak_rss_mb']:,.0f} / {p['workers_peak_rss_mb']:,.0f} MB | {s['first_step_seconds']:,.1f} s "
            f"| {s['peak_rss_mb']:,.0f} MB |"
        )
    if not args.skip_training:
        print("\n| words | global batch | 1 process tok/s | 2 ranks tok/s | scaling efficiency |")
        print("|---|---|---|---|---|")
        for r in rows:
            one, two = r["train_1"]["targets_per_s"], r["train_2"]["targets_per_s"]
            print(f"| {r['tokens_asked'] / 1e6:,.0f}M | {args.global_batch} | {one:,.0f} | {two:,.0f} "
                  f"| {two / (2 * one):.0%} |")  # fmt: skip


if __name__ == "__main__":
    main()
