r"""The demo page (examples/app.py) under load: 1, 4 and 16 gradio_client users at once, each generating a continuation
and scoring a 500-word text, against the app served on 127.0.0.1 and a free port; it stops by itself.

    python benchmarks/load.py [--users 1 4 16] [--rounds 3] [--write benchmarks/results_load_cpu.md]

Each user has a client of its own and a made-up name of its own in its prompt and its text (16 names the
vocabulary lacks, so a folder that spells writes them in bytes). In a round all users start together:
/generate_stream (the prompt, the app's default folder and decoding, 50 whole words: `max_new_words`), then /score of
its 500-word text (bundled WikiText-2 validation words with its name every 50 words). Reported per number of users
(all rounds together): time to the first whole word and to the 50th (p50, p95: nearest rank), the score's time,
requests that failed, words written, and crossings: a user's continuation or scored words holding another user's
name (substring, any case). The server's peak RSS: psutil's RSS sampled every 50 ms, and the kernel's high-water mark
(VmHWM) where there is one. Every request has a deadline (--timeout), and the app is stopped at the end whatever
happens. Loopback only; no timing asserts.
"""

import argparse
import lzma
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VALID = ROOT / "modeling_pointer_sentinel" / "data" / "wikitext-2" / "wiki.valid.tokens.xz"
# made-up names the vocabulary lacks, one per user
NAMES = "Brandeloq Cwystrom Darvenholt Eskimbar Fennarow Gorvalith Hulmisk Istrevane Jorrabeck Kelvondry".split()
NAMES += "Lumbrisk Morvathen Nissarow Oxlethby Pruvendal Quorrabin".split()
WORDS, SCORE_WORDS = 50, 500


def prompt(name: str) -> str:
    return f"\n{name} was born in Esselbrook in 1901. In 1920 {name} left Esselbrook, and {name}"


def score_text(words: list[str], i: int, name: str, n: int = SCORE_WORDS) -> str:
    """n words of the validation text from user i's own place, its name every 50 words from the first (running text: a
    line break for each `<eos>`)."""
    start = 1000 + i * n
    chunk = words[start : start + n]
    for k in range(0, n, 50):
        chunk[k] = name
    return " ".join(chunk).replace(" <eos> ", "\n").replace("<eos>", "\n")


def corpus() -> list[str]:
    """The bundled WikiText-2 validation split's words, each line's then `<eos>`."""
    with lzma.open(VALID, "rt", encoding="utf-8") as f:
        return [w for line in f for w in [*line.split(), "<eos>"]]


def nearest_rank(xs: list[float], q: float) -> float:
    """The q-quantile by nearest rank: the smallest value with at least q of the values at or below it."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(port: int, log, app_args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    command = [sys.executable, str(ROOT / "examples" / "app.py"), "--host", "127.0.0.1", "--port", str(port), *app_args]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
            return proc
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"load.py: error: the app exited ({proc.returncode}): see {log.name}")
            time.sleep(0.5)
    proc.kill()
    sys.exit("load.py: error: the app did not serve within 300 s")


class PeakRSS:
    """The server's RSS sampled every 50 ms in a thread (psutil), its peak kept."""

    def __init__(self, pid: int):
        import psutil

        self.process, self.peak, self.stop = psutil.Process(pid), 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except Exception:  # the process ended
                return
            time.sleep(0.05)

    def high_water_mark(self) -> int | None:
        """The kernel's peak RSS of the process (Linux's VmHWM), or None."""
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None


def user(client, i: int, text: str, timeout: float, start: threading.Barrier, out: dict, words: int = WORDS):
    """One user: /generate_stream, read as it streams (time to the first whole word and to the end), then /score."""
    name = NAMES[i]
    record = out[i] = {"name": name, "errors": []}
    start.wait()
    t0 = time.perf_counter()
    try:
        job = client.submit(prompt(name), max_new_tokens=200, max_new_words=words, api_name="/generate_stream")
        seen = 0
        while True:
            outputs = job.outputs()
            for o in outputs[seen:]:
                if o.get("words") and "first" not in record:
                    record["first"] = time.perf_counter() - t0
            seen = len(outputs)
            if job.done():
                break
            if time.perf_counter() - t0 > timeout:
                job.cancel()
                raise TimeoutError(f"no answer within {timeout:.0f} s")
            time.sleep(0.005)
        final = job.result(timeout=5)
        record["last"] = time.perf_counter() - t0
        record["text"] = final["text"]
        record["words"] = len(final["words"])
        record["streamed"] = [o.get("text", "") for o in job.outputs()]
    except Exception as e:  # counted: the target is none
        record["errors"].append(f"generate: {type(e).__name__}: {str(e)[:200]}")
    t1 = time.perf_counter()
    try:
        scored = client.submit(text, api_name="/score").result(timeout=timeout)
        record["score"] = time.perf_counter() - t1
        record["scored"] = [w["word"] for w in scored["words_scored"]]
    except Exception as e:
        record["errors"].append(f"score: {type(e).__name__}: {str(e)[:200]}")


def crossings(record: dict, names: list[str]) -> list[str]:
    """The other users' names that this user's continuation (streamed or final) or scored words hold."""
    seen = " ".join([record.get("text", ""), *record.get("streamed", []), *record.get("scored", [])]).lower()
    return [n for n in names if n != record["name"] and n.lower() in seen]


def run_round(url: str, n: int, corpus: list[str], timeout: float, words=WORDS, score_words=SCORE_WORDS) -> list[dict]:
    """n users at once (`user`), each its record with `crossed`: the other users' names its answers hold."""
    from gradio_client import Client

    clients = [Client(url, verbose=False) for _ in range(n)]  # connected before the clock starts
    texts = [score_text(corpus, i, NAMES[i], score_words) for i in range(n)]
    start, out = threading.Barrier(n), {}
    threads = [threading.Thread(target=user, args=(clients[i], i, texts[i], timeout, start, out, words))
               for i in range(n)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 60)
    records = [out.get(i, {"name": NAMES[i], "errors": ["no answer"]}) for i in range(n)]
    for r in records:
        r["crossed"] = crossings(r, NAMES[:n])
    return records


def pause_background() -> list[int]:
    """SIGSTOP the shared machine's long background runs (baselines.py, quality_runs.py) and the processes they
    started (their training runs), so they do not weigh on the timing; `resume` continues them."""
    import psutil

    found = subprocess.run(["pgrep", "-f", "baselines.py|quality_runs.py"], capture_output=True, text=True).stdout
    pids = [int(p) for p in found.split() if int(p) != os.getpid()]
    for p in list(pids):
        try:
            pids += [c.pid for c in psutil.Process(p).children(recursive=True)]
        except psutil.Error:
            pass
    for p in pids:
        try:
            os.kill(p, 19)  # SIGSTOP
        except OSError:
            pass
    return pids


def resume(pids: list[int]):
    for p in pids:
        try:
            os.kill(p, 18)  # SIGCONT
        except OSError:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per number of users")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a request may take before it fails")
    parser.add_argument("--app_args", nargs=argparse.REMAINDER, default=[], help="passed on to app.py, e.g. "
                        "--concurrency 1")  # fmt: skip
    parser.add_argument(
        "--pause_background",
        action="store_true",
        help="SIGSTOP baselines.py and quality_runs.py processes while timing (SIGCONT after)",
    )
    parser.add_argument("--write", help="write the table to this markdown file")
    args = parser.parse_args()
    if not all(1 <= n <= len(NAMES) for n in args.users):
        parser.error(f"--users must each be in [1, {len(NAMES)}]")
    words = corpus()
    port, log = free_port(), tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    proc = serve(port, log, args.app_args)
    url = f"http://127.0.0.1:{port}/"
    rss, paused, results, loads = PeakRSS(proc.pid), [], {}, []
    try:
        from gradio_client import Client

        # warm-up: the first call of each endpoint pays the queue's and the models' start (not timed)
        Client(url, verbose=False).predict(prompt("Warmup"), api_name="/generate")
        Client(url, verbose=False).predict(score_text(words, 0, "Warmup"), api_name="/score")
        if args.pause_background:
            paused = pause_background()
        for n in args.users:
            results[n] = []
            for r in range(args.rounds):
                loads.append(os.getloadavg()[0])
                print(f"{n} users, round {r + 1} of {args.rounds}", file=sys.stderr)
                results[n] += run_round(url, n, words, args.timeout)
        hwm = rss.high_water_mark()
    finally:
        resume(paused)
        rss.stop.set()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    text = table(args, results, rss.peak, hwm, loads, paused)
    print(text)
    if args.write:
        Path(args.write).write_text(text)


def table(args, results: dict, peak: int, hwm: int | None, loads: list[float], paused: list[int]) -> str:
    def q(xs, p):
        return f"{nearest_rank(xs, p):.2f}" if xs else "—"

    concurrency = next((args.app_args[i + 1] for i, a in enumerate(args.app_args[:-1]) if a == "--concurrency"),
                       "the app's default")  # fmt: skip
    lines = [
        f"Command: `python benchmarks/load.py --users {' '.join(map(str, args.users))} --rounds {args.rounds}"
        f"{' --pause_background' if args.pause_background else ''}"
        f"{' --app_args ' + ' '.join(args.app_args) if args.app_args else ''}`; {platform.machine()}, "
        f"{os.cpu_count()} cores, load average at the rounds' starts {min(loads):.1f}–{max(loads):.1f}; the queue's "
        f"concurrency: {concurrency}; "
        + (
            f"{len(paused)} background runs paused (SIGSTOP) while timing, resumed (SIGCONT) after."
            if args.pause_background
            else "background runs not paused."
        )
        + f" Each user: /generate_stream ({WORDS} words, the app's default folder and decoding), then /score of a "
        f"{SCORE_WORDS}-word text; all users of a round start together; seconds from the request; p95 by nearest "
        "rank over all rounds' users.",
        "",
        "| users | requests | failed | crossings | first word p50 / p95 s | last word p50 / p95 s | words written "
        "(mean) | /score 500 words p50 / p95 s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, records in results.items():
        first = [r["first"] for r in records if "first" in r]
        last = [r["last"] for r in records if "last" in r]
        score = [r["score"] for r in records if "score" in r]
        failed = sum(len(r["errors"]) for r in records)
        crossed = sum(len(r["crossed"]) for r in records)
        written = statistics.fmean(r["words"] for r in records if "words" in r) if last else float("nan")
        lines.append(
            f"| {n} | {2 * len(records)} | {failed} | {crossed} | {q(first, 0.5)} / {q(first, 0.95)} | "
            f"{q(last, 0.5)} / {q(last, 0.95)} | {written:.1f} | {q(score, 0.5)} / {q(score, 0.95)} |"
        )
    lines += ["", f"Server peak RSS: {peak / 2**20:,.0f} MiB (psutil, sampled every 50 ms)"
              + (f"; {hwm / 2**20:,.0f} MiB (the kernel's VmHWM)." if hwm else ".")]  # fmt: skip
    errors = [e for records in results.values() for r in records for e in r["errors"]]
    if errors:
        lines += ["", "Failures: " + "; ".join(sorted(set(errors))[:5])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
