r"""The page of examples/export_web.py in Debian's Chromium (Playwright), measured as tests/test_web_page.py drives it:
parity with PyTorch on all ten prompts, speed against examples/onnx_generate.py, first word cold and cached, and
the files a browser downloads.

    python benchmarks/web.py [--write benchmarks/results_web_cpu.md] [--rounds 3]

- parity: 50 greedy words after each of the test's ten prompts (unseen, spelled names), on the fp32 graphs and on
  int8: the page's tokens against examples/app.py's continuation (PyTorch's `generate`), and the largest difference
  of each word's gate and pointer share (app.py's, from `inspection.explain`);
- speed: words per second of greedy decoding in the page (int8, the prompt read first and not timed), against
  `OnnxPointerSentinel` of examples/onnx_generate.py on the same int8 graphs (the site's files), one thread each, the
  same prompts and token counts; median over prompts and `--rounds`;
- first word: from navigation to the first word of the page's own prompt (`?autorun`), in a fresh browser profile
  (cold: nothing cached) and again after the service worker holds the site (cached);
- size: each model's files (int8 graphs, tokenizer, start state) and the runtime's three files, raw (what
  `python -m http.server` sends) and gzip -9 (what a host that compresses sends).
Reported, never asserted. The PTB and WikiText-2 pointer folders are exported (`--fp32` for PTB).
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))
FOLDERS = ["pretrained/ptb-pointer-sentinel-lstm-2x200", "pretrained/wt2-pointer-sentinel-lstm-2x200"]


def run(cmd: list[str]):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")


def page_generate(page, name: str, precision: str, prompt: str, words: int) -> dict:
    return page.evaluate(
        """async ([model, precision, prompt, maxWords]) => {
            const r = await window.pointerPage.generate({model, precision, prompt, maxWords});
            return {tokens: r.tokens, timings: r.timings, words: r.words.map((w) => ({word: w.word, kind: w.kind,
                    gate: w.gate, share: w.pointer_share}))};
        }""",
        [name, precision, prompt, words],
    )


def parity(page, prompts, words: int) -> dict:
    import app

    models, rows = app.Models(), {}
    folder, name = FOLDERS[0], Path(FOLDERS[0]).name
    for precision in ("fp32", "int8"):
        same, gate, share, copies = 0, 0.0, 0.0, 0
        for prompt in prompts:
            got = page_generate(page, name, precision, prompt, words)
            n = min(len(got["tokens"]), app.MAX_NEW_TOKENS)  # the app's limit: compare that many
            *_, (_, want, _, _) = app.generate_words(models, folder, prompt, mode="greedy", max_new_tokens=n)
            same += got["tokens"][:n] == [i for w in want for i in w["ids"]]
            for mine, theirs in zip(got["words"], want, strict=False):  # int8 may part from PyTorch's words
                if mine["word"] != theirs["word"]:
                    break
                gate = max(gate, abs(mine["gate"] - theirs["gate"]))
                share = max(share, abs(mine["share"] - theirs["pointer_share"]))
            copies += sum(w["kind"] == "copy" for w in got["words"])
        rows[precision] = {"prompts": len(prompts), "identical": same, "max_gate_diff": gate,
                           "max_share_diff": share, "copied_words": copies}  # fmt: skip
    return rows


def onnx_folder(site: Path, folder: str, to: Path) -> Path:
    """The site's int8 graphs of `folder` as examples/onnx_generate.py reads them: the graphs and their weights, the
    speller's start state as spell_start.npz, and the folder's tokenizer with its code."""
    import numpy as np
    from export_onnx import SPELL_NAMES, tokenizer_code

    model = site / "models" / Path(folder).name
    shutil.copytree(model, to)
    start = json.loads((model / "start.json").read_text())
    dtypes = {"float32": np.float32, "int64": np.int64, "bool": np.bool_}

    def array(spec):
        values = spec["data"] if "data" in spec else [spec["fill"]] * int(np.prod(spec["dims"]))
        values = [-np.inf if v is None else v for v in values]
        return np.array(values, dtypes[spec["type"]]).reshape(spec["dims"])

    np.savez(to / "spell_start.npz", **{n: array(start[n]) for n in SPELL_NAMES})
    for name in tokenizer_code(ROOT / folder):
        shutil.copy(ROOT / folder / name, to / name)
    return to


def speed(page, site: Path, prompts, words: int, rounds: int) -> dict:
    """Words per second of greedy decoding, the page against onnx_generate.py on the same int8 graphs, per model
    (one thread each)."""
    from onnx_generate import OnnxPointerSentinel

    out = {}
    for folder in FOLDERS:
        name = Path(folder).name
        lm = OnnxPointerSentinel(onnx_folder(site, folder, site.parent / f"onnx-{name}"), int8=True, threads=1)
        in_page, in_python = [], []
        for _ in range(rounds):
            for prompt in prompts:
                got = page_generate(page, name, "int8", prompt, words)
                in_page.append(len(got["words"]) / (got["timings"]["decode_ms"] / 1000))
                ids, _ = lm.encode(prompt)
                start = time.perf_counter()
                lm.prefill(ids)
                prefill = time.perf_counter() - start
                start = time.perf_counter()
                new = lm.generate([ids], len(got["tokens"]))[0]
                seconds = time.perf_counter() - start - prefill
                in_python.append(len(got["words"]) / seconds)
                agree = new == got["tokens"]  # the same graphs, greedy: the same tokens (else a near tie)
                out.setdefault(f"{name}_same_tokens", 0)
                out[f"{name}_same_tokens"] += agree
        page_median, python_median = statistics.median(in_page), statistics.median(in_python)
        out[name] = {"page_words_per_s": page_median, "onnx_generate_words_per_s": python_median,
                     "ratio": page_median / python_median, "runs": len(in_page)}  # fmt: skip
    return out


def first_word(chromium, url: str, rounds: int) -> dict:
    """ms from navigation to the page's first word: a fresh profile (cold), then a reload once the service worker
    holds the site (cached)."""
    cold, cached = [], []
    for _ in range(rounds):
        context = chromium.new_context()
        page = context.new_page()
        for times in (cold, cached):
            page.goto(f"{url}?autorun")
            page.wait_for_function("window.pointerPage && window.pointerPage.firstWordAt", timeout=120_000)
            times.append(page.evaluate("window.pointerPage.firstWordAt"))
            page.wait_for_function("document.body.dataset.state === 'done'", timeout=120_000)
            page.evaluate("navigator.serviceWorker.ready.then(() => true)")
        context.close()
    return {"cold_ms": statistics.median(cold), "cached_ms": statistics.median(cached), "rounds": rounds,
            "cold_all": cold, "cached_all": cached}  # fmt: skip


def screenshot(page, prompt: str, path: Path):
    page.goto(page.url.split("?")[0])
    page.wait_for_function("document.body.dataset.state === 'ready'")
    page.fill("#prompt", prompt)
    page.fill("#max-words", "30")
    page.click("#generate")
    page.wait_for_function("document.body.dataset.state === 'done'", timeout=120_000)
    page.locator("#output .word.copy").first.click()
    page.wait_for_selector("#moment:not([hidden]) #top tbody tr")
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)


def mb(n: int) -> str:
    return f"{n / 1e6:.2f}"


def markdown(r: dict, command: str) -> str:
    lines = [
        "# The page in the browser (examples/export_web.py), CPU",
        "",
        f"Command: `{command}`; {r['machine']}, Chromium {r['chromium']}, onnxruntime-web 1.30.0 (wasm, one thread), "
        f"load average {r['load'][0]:.1f}–{r['load'][1]:.1f} during the run (a shared machine; background training "
        "paused with SIGSTOP while it ran).",
        "",
        "## Parity (50 greedy words after each prompt, tests/test_web_page.py's ten)",
        "",
        "| graphs | prompts | tokens identical to PyTorch `generate` | max gate diff | max pointer-share diff "
        "| copied words |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for precision, p in r["parity"].items():
        lines.append(f"| {precision} | {p['prompts']} | {p['identical']} of {p['prompts']} | {p['max_gate_diff']:.1e} "
                     f"| {p['max_share_diff']:.1e} | {p['copied_words']} |")  # fmt: skip
    lines += ["", "Gate and share are compared over the words both continuations share (all 50 where the tokens are "
              "identical).", "", "## Speed (int8, greedy, one thread)", "",
              "| model | page words/s | onnx_generate.py words/s | page / python | runs |",
              "|---|---:|---:|---:|---:|"]  # fmt: skip
    for name, s in r["speed"].items():
        if not isinstance(s, dict):
            continue
        lines.append(f"| {name} | {s['page_words_per_s']:.1f} | {s['onnx_generate_words_per_s']:.1f} | "
                     f"{s['ratio']:.2f}× | {s['runs']} |")  # fmt: skip
    same = [f"{k.removesuffix('_same_tokens')}: {v} of {r['speed'][k.removesuffix('_same_tokens')]['runs']}"
            for k, v in r["speed"].items() if k.endswith("_same_tokens")]  # fmt: skip
    lines += ["", f"Greedy tokens identical in the page and in onnx_generate.py (same graphs): {'; '.join(same)}."]
    f = r["first_word"]
    lines += ["", f"First word of the page's own prompt (PTB, int8), from navigation, median of {f['rounds']}: "
              f"**{f['cold_ms'] / 1000:.2f} s cold** (fresh profile: the runtime and the model fetched and compiled), "
              f"**{f['cached_ms'] / 1000:.2f} s cached** (the service worker's copy).", "",
              "## Size (what a browser downloads)", "",
              "| files | raw MB (http.server) | gzip -9 MB |", "|---|---:|---:|"]  # fmt: skip
    for name, s in r["size"].items():
        lines.append(f"| {name} | {mb(s['bytes'])} | {mb(s['gzip_bytes'])} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--write", type=Path, help="write the markdown table here")
    p.add_argument("--screenshot", type=Path, default=ROOT / "results" / "web" / "screenshot.png")
    args = p.parse_args()
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import torch
    from playwright.sync_api import sync_playwright
    from test_web_page import CHROMIUM, PROMPTS, free_port

    torch.set_num_threads(1)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        run([sys.executable, str(ROOT / "examples" / "export_web.py"), FOLDERS[0], str(site), "--fp32"])
        ptb = json.loads((site / "export_web.json").read_text())
        run([sys.executable, str(ROOT / "examples" / "export_web.py"), *FOLDERS, str(Path(tmp) / "both")])
        both = json.loads((Path(tmp) / "both" / "export_web.json").read_text())
        sizes = {f"{n} (int8)": both[n] for n in both["models"]} | {"ONNX Runtime Web (3 files)": both["runtime"]}
        graphs = [v for k, v in ptb["files"].items() if k.endswith(("step.onnx", "weights.fp32.bin"))]
        fp32 = {k: sum(v[k] for v in graphs) for k in ("bytes", "gzip_bytes")}
        port, quiet = free_port(), {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        serve = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "-d"]
        server = subprocess.Popen([*serve, str(Path(tmp) / "both"), str(port)], **quiet)
        ptb_server = subprocess.Popen([*serve, str(site), str(port + 1)], **quiet)
        time.sleep(2)
        try:
            with sync_playwright() as pw:
                chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
                page = chromium.new_page(viewport={"width": 1100, "height": 1000})
                page.goto(f"http://127.0.0.1:{port + 1}/")
                page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
                result = {"parity": parity(page, PROMPTS, 50)}
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
                print(json.dumps(result), flush=True)
                result["speed"] = speed(page, Path(tmp) / "both", PROMPTS, 50, args.rounds)
                result["first_word"] = first_word(chromium, f"http://127.0.0.1:{port}/", args.rounds)
                screenshot(page, PROMPTS[0], args.screenshot)
                result["chromium"] = chromium.version
                chromium.close()
        finally:
            server.terminate()
            ptb_server.terminate()
    result["size"] = sizes | {"PTB fp32 graphs (--fp32)": fp32}
    load.append(os.getloadavg()[0])
    result["load"] = (min(load), max(load))
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
    command = "python benchmarks/web.py" + (f" --rounds {args.rounds}" if args.rounds != 3 else "")
    text = markdown(result, command)
    print(json.dumps(result, indent=1))
    print(text)
    if args.write:
        args.write.write_text(text)


if __name__ == "__main__":
    main()
