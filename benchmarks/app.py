r"""How fast the demo page (examples/app.py) answers, as a user sees it: the app served on a free localhost port, driven
in Debian's Chromium (Playwright), timed in the page (performance.now()) from the click.

    python benchmarks/app.py [--rounds 7] [--write benchmarks/results_app_cpu.md]

- first streamed word: from the Generate click to the first word of the continuation on the page (target 0.5 s);
- 50-token continuation: from the click to the page's "N words in" (the pointer model's; target 3 s);
- 4 sessions at once: four browser contexts click Generate together, and four gradio_client clients call /generate
  together: every one must finish without an error (Gradio's queue runs them one at a time).
Greedy, the default prompt and folder, the app's defaults (`--num_threads 1` on a machine of up to 4 cores). No
timing asserts anywhere: the numbers are recorded in BENCHMARKS.md with the machine's load.
"""

import argparse
import os
import platform
import re
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
CLICK = """() => {  // the app stamps each click's renders with data-run: time the first new stamp's
  window.__timing = null;
  const stamp = (sel) => document.querySelector(sel)?.dataset.run;
  const before = [stamp('#continuation .ps-text'), stamp('#gen-status .ps-status')];
  let first = null, whole = null, status = null;
  const t0 = performance.now();
  const seen = new MutationObserver(() => {
    const now = performance.now() - t0;
    const text = document.querySelector('#continuation .ps-text');
    if (first === null && text && text.dataset.run !== before[0] && text.querySelector('.w')) first = now;
    const s = document.querySelector('#gen-status .ps-status');
    if (whole === null && s && s.dataset.run !== before[1] && s.innerText.includes('words in')) {
      whole = now;
      status = s.innerText;
    }
    // done when the plain LSTM's continuation is in too (a click while the event runs would be dropped)
    if (whole !== null && stamp('#compare .ps-compare') === s.dataset.run) {
      seen.disconnect();
      window.__timing = {first: first / 1000, whole: whole / 1000, status};
    }
  });
  seen.observe(document.body, {childList: true, subtree: true, characterData: true, attributes: true});
  document.querySelector('#generate').click();
}"""


def timed(pages) -> list[dict]:
    """Click Generate on every page at once (no waiting in between), then wait for each page's timing."""
    for page in pages:
        page.evaluate(CLICK)
    return [page.wait_for_function("window.__timing", timeout=120_000).json_value() for page in pages]


def serve(port: int, log) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / "app.py"), "--port", str(port)], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
            return proc
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"the app exited: see {log.name}")
            time.sleep(1)
    sys.exit("the app did not serve within 300 s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--port", type=int, default=0, help="default: a free one")
    parser.add_argument("--write", help="write the table to this markdown file")
    args = parser.parse_args()
    from gradio_client import Client
    from playwright.sync_api import sync_playwright

    if not args.port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.port = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    proc = serve(args.port, log)
    url = f"http://127.0.0.1:{args.port}/"
    load = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(url)
            page.wait_for_selector("#generate")
            page.locator("#max_new_tokens input").fill("50")
            timed([page])  # warm-up: the first call pays the queue's and the page's start
            rounds = []
            for _ in range(args.rounds):
                load.append(os.getloadavg()[0])
                rounds.append(timed([page])[0])
                assert re.search(r"\d+ words in", rounds[-1]["status"]), rounds[
                    -1
                ]  # 50 ids: a spelled word takes several
            # 4 sessions at once in the browser, then 4 API clients at once
            pages = [browser.new_context().new_page() for _ in range(4)]
            for q in pages:
                q.goto(url)
                q.wait_for_selector("#generate")
            t0 = time.perf_counter()
            sessions = timed(pages)
            browser_wall = time.perf_counter() - t0
            browser.close()
        errors, api = [], [None] * 4

        def call(i):
            try:
                t = time.perf_counter()
                out = Client(url, verbose=False).predict("\nThe game was released in", api_name="/generate")
                api[i] = (time.perf_counter() - t, len(out["words"]))
            except Exception as e:  # recorded: the target is none
                errors.append(repr(e))

        threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        api_wall = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(30)
    first = [r["first"] for r in rounds]
    whole = [r["whole"] for r in rounds]
    server = [float(re.search(r"words in ([0-9.]+) s", r["status"]).group(1)) for r in rounds]
    ok = sum(bool(re.search(r"\d+ words in", s["status"])) for s in sessions)

    def row(name, xs, target):
        m = statistics.median(xs)
        spread = f"{min(xs):.3f}–{max(xs):.3f}"
        return f"| {name} | {m:.3f} | {spread} | {len(xs)} | ≤ {target} s | {'not ' * (m > target)}met |"

    lines = [
        f"Command: `python benchmarks/app.py --rounds {args.rounds}`; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, load average during the rounds {min(load):.1f}–{max(load):.1f} (a shared machine).",
        "",
        "| measure (greedy, default prompt and folder) | median s | min–max s | rounds | target | verdict |",
        "|---|---:|---:|---:|---|---|",
        row("first streamed word after the click", first, 0.5),
        row("50-word continuation after the click", whole, 3.0),
        row("the same, in the server (the page's status: model, explain, no page)", server, 3.0),
        f"| 4 browser sessions at once, 50 words each (wall of all four; min–max: each) | {browser_wall:.3f} | "
        f"{min(s['whole'] for s in sessions):.3f}–{max(s['whole'] for s in sessions):.3f} | {ok} of 4 | no error | "
        f"{'met' if ok == 4 else 'not met'} |",
        f"| 4 gradio_client /generate calls at once (wall of all four; min–max: each) | {api_wall:.3f} | "
        f"{min(a[0] for a in api if a):.3f}–{max(a[0] for a in api if a):.3f} | {4 - len(errors)} of 4 | no error | "
        f"{'met' if not errors else 'not met: ' + '; '.join(errors)} |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        Path(args.write).write_text(text)


if __name__ == "__main__":
    main()
