r"""The page of examples/export_web.py in Debian's Chromium (Playwright), measured as tests/test_web_page.py drives it:
parity with PyTorch on all ten prompts, speed against examples/onnx_generate.py, first word cold and cached, and
the files a browser downloads; with --baseline, the same for an earlier checkout's page, side by side in one run.

    python benchmarks/web.py [--baseline DIR] [--write benchmarks/results_web_cpu.md] [--rounds 3]
    mkdir /tmp/before && git archive HEAD | tar -x -C /tmp/before    # a baseline: the last commit

- parity: 50 greedy words after each of the test's ten prompts (unseen, spelled names), on the fp32 graphs and on
  int8: the page's tokens against examples/app.py's continuation (PyTorch's `generate`), and the largest difference
  of each word's gate and pointer share (app.py's, from `inspection.explain`);
- speed: words per second of greedy decoding in the page (int8, the prompt read first and not timed), against
  `OnnxPointerSentinel` of examples/onnx_generate.py on the folder's int8 export (export_onnx.py's dynamic int8
  graphs, the word step with the pointer's view as the page's: what onnx_generate.py runs), one thread each, the
  same prompts and token counts; median over prompts and `--rounds`; the pages (this one and the baseline's) and
  Python take turns prompt by prompt, so that a busy machine slows them alike;
- the word step alone in each runner, and its largest product alone (h_t times the joined matrix of the heads that
  read it, random weights of its shape): float32 in the page, int8 in ONNX Runtime as onnx_generate.py's graphs;
- first word: from navigation to the first word of the page's own prompt (`?autorun`), in a fresh browser profile
  (cold: nothing cached), then reloaded at once (the service worker holds the site; the browser has not yet stored
  its compiled wasm), then reloaded again after 4 s (cached: both);
- size: each model's files (int8 graphs, tokenizer, start state) and the runtime's three files, as
  `python -m http.server` sends them (raw bytes; the page's large files are gzipped by export_web.py) and gzip -9
  (what a host that compresses sends).
Reported, never asserted. The PTB and WikiText-2 pointer folders are exported (`--fp32` for PTB). The baseline's
web/node_modules is copied from this checkout's when both lockfiles are the same (no download).
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


def python_folder(folder: str, to: Path) -> Path:
    """`folder`'s int8 export as examples/onnx_generate.py runs it: export_onnx.py's graphs (the word step with the
    pointer's view, as the page's), dynamically quantized (`quantize`), the speller's start state and the folder's
    tokenizer with its code."""
    from cli import load_saved_model
    from export_onnx import FILES, export, quantize, spell_path, tokenizer_code

    _, model = load_saved_model(str(ROOT / folder))
    to.mkdir(parents=True)
    for name in [*FILES, *tokenizer_code(ROOT / folder)]:
        if (ROOT / folder / name).is_file():
            shutil.copy(ROOT / folder / name, to / name)
    export(model, to / "decode_step.onnx", inspect=True)
    for graph in (to / "decode_step.onnx", spell_path(to / "decode_step.onnx")):
        quantize(graph, graph.with_name(graph.name.replace(".onnx", ".int8.onnx")))
    return to


def speed(pages: dict, python: dict, prompts, words: int, rounds: int) -> dict:
    """Words per second of greedy decoding, each page (`pages`: label -> page) against onnx_generate.py on the
    folder's int8 export (`python`: model name -> folder), per model, one thread each; page and Python take turns."""
    from onnx_generate import OnnxPointerSentinel

    out = {}
    for folder in FOLDERS:
        name = Path(folder).name
        lm = OnnxPointerSentinel(python[name], int8=True, threads=1)
        rates, same = {label: [] for label in [*pages, "python"]}, dict.fromkeys(pages, 0)
        for page in pages.values():  # a first continuation each: the runtime's code warms up
            page_generate(page, name, "int8", prompts[0], words)
        for _ in range(rounds):
            for prompt in prompts:
                runs = {label: page_generate(page, name, "int8", prompt, words) for label, page in pages.items()}
                for label, got in runs.items():
                    rates[label].append(len(got["words"]) / (got["timings"]["decode_ms"] / 1000))
                got = runs[next(iter(pages))]
                ids, _ = lm.encode(prompt)
                start = time.perf_counter()
                lm.prefill(ids)
                prefill = time.perf_counter() - start
                start = time.perf_counter()
                new = lm.generate([ids], len(got["tokens"]))[0]
                seconds = time.perf_counter() - start - prefill
                rates["python"].append(len(got["words"]) / seconds)
                for label, run in runs.items():  # greedy on int8 weights: the same tokens but at near ties
                    same[label] += new == run["tokens"]
        python_median = statistics.median(rates["python"])
        medians = {label: statistics.median(rates[label]) for label in pages}
        out[name] = {"onnx_generate_words_per_s": python_median, "runs": len(rates["python"]), "pages": {
            label: {"words_per_s": m, "ratio": m / python_median, "same_tokens_as_python": same[label]}
            for label, m in medians.items()}}  # fmt: skip
    return out


def session_ms(session, feed: dict, n: int) -> float:
    """ms of an ONNX Runtime session's run on `feed`, the mean of `n` after 50."""
    for _ in range(50):
        session.run(None, feed)
    start = time.perf_counter()
    for _ in range(n):
        session.run(None, feed)
    return (time.perf_counter() - start) / n * 1000


def word_step_alone(pages: dict, python: dict, prompt: str, rounds: int, n: int = 300) -> dict:
    """ms of the word step's graph alone (one vocabulary word after `prompt`, the same feed `n` times after a warm-up),
    in each page (`session.run`) and in onnx_generate.py (`InferenceSession.run`), the median of `rounds` in which
    they take turns: how much of a word's time the graph takes, the rest being each runner's own bookkeeping."""
    import numpy as np
    from onnx_generate import OnnxPointerSentinel

    out = {}
    for folder in FOLDERS:
        name = Path(folder).name
        lm = OnnxPointerSentinel(python[name], int8=True, threads=1)
        ids, _ = lm.encode(prompt)
        state = lm.prefill(ids)[1][0]
        steps, word = lm.spelled, next(i for i in reversed(ids) if i < lm.vocab_size)
        feed = {k: state[k] for k in steps.word_in if k in state} | {
            "input_ids": np.array([word]), "spelling": np.full((1, steps.K), -1, np.int64)}  # fmt: skip

        times = {"python_ms": [], **{label: [] for label in pages}}
        for r in range(rounds):
            runners = [("python_ms", None), *pages.items()]
            for label, page in runners if r % 2 == 0 else reversed(runners):
                times[label].append(session_ms(steps.word, feed, n) if page is None else page.evaluate(
                    """async ([name, prompt, word, n]) => {
                        const m = await window.pointerPage.getModel(name, "int8"), row = m.empty();
                        for (const t of m.tokenizer.encode(prompt)) await m.step(t, row);
                        const feed = m.wordFeed(row, word);
                        for (let i = 0; i < 50; i++) await m.word.run(feed);
                        const start = performance.now();
                        for (let i = 0; i < n; i++) await m.word.run(feed);
                        return (performance.now() - start) / n;
                    }""",
                    [name, prompt, word, n],
                ))  # fmt: skip
        out[name] = {label: statistics.median(v) for label, v in times.items()}
    return out


def product_alone(pages: dict, site: Path, n: int = 300) -> dict:
    """ms of the word step's largest product alone (h_t times the joined matrix of the heads that read it, one Gemm:
    export_onnx.fuse_shared_gemms), on random weights of its shape, one thread: float32 in each page (as the page's
    graphs compute it) and int8 in ONNX Runtime with activations quantized at each call (as onnx_generate.py's
    graphs do). The part of a word step no fewer kernels can remove."""
    import base64
    import gzip

    import numpy as np
    import onnx
    import onnxruntime as ort
    from export_onnx import quantize
    from onnx import TensorProto, helper, numpy_helper

    out = {}
    for folder in FOLDERS:
        name = Path(folder).name
        word = site / "models" / name / "decode_step.int8.onnx.gz"
        graph = onnx.shape_inference.infer_shapes(onnx.load_from_string(gzip.decompress(word.read_bytes()))).graph
        known = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.value_info}
        shapes = []
        for node in (g for g in graph.node if g.op_type == "Gemm" and g.input[1] in known):
            k, m = known[node.input[1]]
            shapes.append((m, k) if any(a.name == "transB" and a.i for a in node.attribute) else (k, m))
        K, N = max(shapes, key=lambda km: km[0] * km[1])
        weights = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32) * 0.05
        product = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "product",
                                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K])],
                                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, N])],
                                    [numpy_helper.from_array(weights, "w")])  # fmt: skip
        model = helper.make_model(product, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        with tempfile.TemporaryDirectory() as tmp:
            fp32, int8 = Path(tmp) / "product.onnx", Path(tmp) / "product.int8.onnx"
            onnx.save(model, str(fp32))
            quantize(fp32, int8)
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            x = {"x": np.full((1, K), 0.1, np.float32)}
            out[name] = {"shape": [K, N], "python_int8_ms": session_ms(ort.InferenceSession(str(int8), options), x, n)}
            data = base64.b64encode(fp32.read_bytes()).decode()
        for label, page in pages.items():
            out[name][label] = page.evaluate(
                """async ([name, data, K, n]) => {
                    const m = await window.pointerPage.getModel(name, "int8");
                    const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
                    const { SESSION_OPTIONS } = await import("./runner.js");
                    const session = await m.ort.InferenceSession.create(bytes, SESSION_OPTIONS);
                    const feed = { x: new m.ort.Tensor("float32", new Float32Array(K).fill(0.1), [1, K]) };
                    for (let i = 0; i < 50; i++) await session.run(feed);
                    const start = performance.now();
                    for (let i = 0; i < n; i++) await session.run(feed);
                    return (performance.now() - start) / n;
                }""",
                [name, data, K, n],
            )
    return out


def first_word(chromium, url: str, rounds: int) -> dict:
    """ms from navigation to the page's first word: a fresh profile (cold), a reload at once when the service worker
    holds the site (`at_once`: the browser has not yet stored the runtime's compiled wasm, which it does a few seconds
    after compiling it), and a reload 4 s later (cached)."""
    times = {"cold": [], "at_once": [], "cached": []}
    for _ in range(rounds):
        context = chromium.new_context()
        page = context.new_page()
        for kind, wait in (("cold", 0), ("at_once", 0), ("cached", 4)):
            time.sleep(wait)
            page.goto(f"{url}?autorun")
            page.wait_for_function("window.pointerPage && window.pointerPage.firstWordAt", timeout=120_000)
            times[kind].append(page.evaluate("window.pointerPage.firstWordAt"))
            page.wait_for_function("document.body.dataset.state === 'done'", timeout=120_000)
            page.evaluate("navigator.serviceWorker.ready.then(() => true)")
        context.close()
    return {**{f"{k}_ms": statistics.median(v) for k, v in times.items()}, "rounds": rounds,
            **{f"{k}_all": v for k, v in times.items()}}  # fmt: skip


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
    labels = list(r["first_word"])  # "page", and "baseline" with --baseline
    lines = [
        "# The page in the browser (examples/export_web.py), CPU",
        "",
        f"Command: `{command}`; {r['machine']}, Chromium {r['chromium']}, onnxruntime-web 1.30.0 (wasm, one thread), "
        f"load average {r['load'][0]:.1f}–{r['load'][1]:.1f} during the run ({r['conditions']}).",
        "",
    ]
    if "baseline" in labels:
        lines += [f"Baseline: {r['baseline']}, measured in the same run (its page and this one take turns).", ""]
    lines += [
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
              "| model | page | page words/s | onnx_generate.py words/s | page / python | tokens as python's | runs |",
              "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, s in r["speed"].items():
        for label, page in s["pages"].items():
            python, n = s["onnx_generate_words_per_s"], s["runs"]
            lines.append(f"| {name} | {label} | {page['words_per_s']:.1f} | {python:.1f} | {page['ratio']:.2f}× "
                         f"| {page['same_tokens_as_python']} of {n} | {n} |")  # fmt: skip
    lines += ["", "onnx_generate.py runs export_onnx.py's dynamic int8 graphs (int8 products, activations quantized at "
              "each call: its fastest on x86); the page runs export_web.py's (int8 weights, float32 products: its "
              "fastest in wasm), so greedy tokens part at near ties.", "",
              "The word step's graph alone (one vocabulary word after the first prompt, the same feed 300 times after "
              "50; the median of the rounds, the runners taking turns), against each runner's whole time a word (the "
              "medians above):", "",
              "| model | runner | word step alone (ms) | a word in all (ms) |", "|---|---|---:|---:|"]  # fmt: skip
    for name, w in r["word_step"].items():
        s = r["speed"][name]
        python = 1000 / s["onnx_generate_words_per_s"]
        lines.append(f"| {name} | onnx_generate.py | {w['python_ms']:.3f} | {python:.3f} |")
        for label, page in s["pages"].items():
            lines.append(f"| {name} | {label} | {w[label]:.3f} | {1000 / page['words_per_s']:.3f} |")
    if "product" in r:
        lines += ["", "The word step's largest product alone (h_t times the joined matrix of the heads that read it, "
                  "random weights of its shape, the same input 300 times after 50): onnx_generate.py's int8 "
                  "(activations quantized at each call) against the page's float32; a part of the word step that "
                  "fewer kernels would not remove:", "",
                  "| model | runner | product | alone (ms) |", "|---|---|---|---:|"]  # fmt: skip
        for name, w in r["product"].items():
            shape = f"(1, {w['shape'][0]}) × ({w['shape'][0]}, {w['shape'][1]})"
            lines.append(f"| {name} | onnx_generate.py | {shape} | {w['python_int8_ms']:.3f} |")
            lines += [f"| {name} | {label} | {shape} | {w[label]:.3f} |" for label in r["speed"][name]["pages"]]
    lines += ["",
              "## First word (the page's own prompt, PTB, int8, from navigation, median of "
              f"{r['first_word'][labels[0]]['rounds']})", "",
              "| page | cold (fresh profile) | reload at once | cached (reload 4 s later) |",
              "|---|---:|---:|---:|"]  # fmt: skip
    for label, f in r["first_word"].items():
        lines.append(f"| {label} | {f['cold_ms'] / 1000:.2f} s | {f['at_once_ms'] / 1000:.2f} s | "
                     f"{f['cached_ms'] / 1000:.2f} s |")  # fmt: skip
    lines += ["", "Cold: the runtime and the model fetched and compiled. At once: the service worker holds the site, "
              "but the browser stores the runtime's compiled wasm only a few seconds after compiling it, so it is "
              "compiled again. Cached: both.", "", "## Size (what a browser downloads)", "",
              "| files | page | bytes as http.server sends them (MB) | gzip -9 MB |",
              "|---|---|---:|---:|"]  # fmt: skip
    for label, sizes in r["size"].items():
        for name, s in sizes.items():
            lines.append(f"| {name} | {label} | {mb(s['bytes'])} | {mb(s['gzip_bytes'])} |")
    return "\n".join(lines) + "\n"


def export_site(root: Path, folders: list[str], out: Path, *flags: str) -> dict:
    """The site of `root`'s examples/export_web.py (this checkout's or the baseline's) at `out`; its export_web.json."""
    run([sys.executable, str(root / "examples" / "export_web.py"), *[str(ROOT / f) for f in folders], str(out), *flags])
    return json.loads((out / "export_web.json").read_text())


def sizes(report: dict, fp32: dict | None = None) -> dict:
    out = {f"{n} (int8)": report[n] for n in report["models"]} | {"ONNX Runtime Web (3 files)": report["runtime"]}
    if fp32 is not None:
        graphs = [v for k, v in fp32["files"].items() if "step.onnx" in k or "weights.fp32.bin" in k]
        out["PTB fp32 graphs (--fp32)"] = {k: sum(v[k] for v in graphs) for k in ("bytes", "gzip_bytes")}
    return out


def baseline_tree(path: Path) -> Path:
    """A baseline checkout, its web/node_modules copied from this one's if missing and the lockfiles agree."""
    if not (path / "examples" / "export_web.py").is_file():
        sys.exit(f"--baseline {path}: no examples/export_web.py there (give a copy of a checkout)")
    mine, theirs = ROOT / "web" / "node_modules", path / "web" / "node_modules"
    same = (ROOT / "web" / "package-lock.json").read_bytes() == (path / "web" / "package-lock.json").read_bytes()
    if not theirs.exists() and mine.exists() and same:
        shutil.copytree(mine, theirs, symlinks=True)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--baseline", type=Path, help="a copy of an earlier checkout: its page measured beside this one")
    p.add_argument("--baseline_name", help="what the results file calls the baseline (default: its path)")
    p.add_argument("--conditions", default="a shared machine", help="what the results file says of the machine")
    p.add_argument("--write", type=Path, help="write the markdown table here")
    p.add_argument("--screenshot", type=Path, default=ROOT / "results" / "web" / "screenshot.png")
    args = p.parse_args()
    baseline = baseline_tree(args.baseline.resolve()) if args.baseline else None
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import torch
    from playwright.sync_api import sync_playwright
    from test_web_page import CHROMIUM, PROMPTS, free_port

    torch.set_num_threads(1)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ptb = export_site(ROOT, FOLDERS[:1], tmp / "ptb", "--fp32")
        sites = {"page": tmp / "site"}
        result = {"size": {"page": sizes(export_site(ROOT, FOLDERS, sites["page"]), ptb)}}
        if baseline:
            sites["baseline"] = tmp / "baseline"
            result["size"]["baseline"] = sizes(export_site(baseline, FOLDERS, sites["baseline"]))
        python = {Path(f).name: python_folder(f, tmp / f"onnx-{Path(f).name}") for f in FOLDERS}
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        servers, urls = [], {}
        for label, site in [("ptb", tmp / "ptb"), *sites.items()]:
            port = free_port()
            servers.append(subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "-d",
                                             str(site), str(port)], **quiet))  # fmt: skip
            urls[label] = f"http://127.0.0.1:{port}/"
        time.sleep(2)
        try:
            with sync_playwright() as pw:
                chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
                pages = {}
                for label in ["ptb", *sites]:
                    pages[label] = chromium.new_page(viewport={"width": 1100, "height": 1000})
                    pages[label].goto(urls[label])
                    pages[label].wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
                result["parity"] = parity(pages.pop("ptb"), PROMPTS, 50)
                print(json.dumps(result), flush=True)
                result["speed"] = speed(pages, python, PROMPTS, 50, args.rounds)
                print(json.dumps(result["speed"]), flush=True)
                result["word_step"] = word_step_alone(pages, python, PROMPTS[0], args.rounds)
                result["product"] = product_alone(pages, sites["page"])
                result["first_word"] = {label: first_word(chromium, urls[label], args.rounds) for label in sites}
                screenshot(pages["page"], PROMPTS[0], args.screenshot)
                result["chromium"] = chromium.version
                chromium.close()
        finally:
            for server in servers:
                server.terminate()
    load.append(os.getloadavg()[0])
    result["load"] = (min(load), max(load))
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
    result["conditions"] = args.conditions
    result["baseline"] = (args.baseline_name or f"`{args.baseline}`") if args.baseline else None
    command = "python benchmarks/web.py" + (f" --rounds {args.rounds}" if args.rounds != 3 else "")
    command += " --baseline BEFORE" if args.baseline else ""
    text = markdown(result, command)
    print(json.dumps(result, indent=1))
    print(text)
    if args.write:
        args.write.write_text(text)


if __name__ == "__main__":
    main()
