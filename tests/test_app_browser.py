"""examples/app.py served on a free localhost port and driven in Debian's Chromium by Playwright (never a browser
download: `apt-get install chromium`, as .ci/run does), and through Gradio's API by `gradio_client`.

The browser types a prompt with an unseen name into the default folder (it copies), generates, selects a copied word and
checks the window view, the gate and the name; then sends each bad input and checks the page answers it with a message,
and that the page still generates after them. `UPDATE_SCREENSHOT=1` writes the README's screenshot,
results/app/screenshot.png.
"""

import importlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT

CHROMIUM = Path("/usr/bin/chromium")
COPYING = "pretrained/wt2-pointer-sentinel-lstm-2x200"  # the page's default folder: it copies unseen words (copy head)
PROMPT = "\nThe ship Kestrelwind sailed to Norway. The Kestrelwind was sunk in 1940. The"
SCREENSHOT = ROOT / "results" / "app" / "screenshot.png"


def require(module: str):
    """The module, or a skip; under CI a missing one fails, so CI always runs these tests."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


def test_ci_installs_chromium_as_the_readme_says():
    """.ci/run's Chromium line is the README's, so a reader runs the browser test as CI does."""
    line = next(x for x in (ROOT / ".ci" / "run").read_text().splitlines() if "apt-get install" in x)
    assert "chromium" in line and f"`{line}`" in (ROOT / "README.md").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app on 127.0.0.1 and a free port, the way a user starts it (from a folder of their own, not the
    checkout's root); stopped whatever happens."""
    require("gradio")
    port, log_path = free_port(), tmp_path_factory.mktemp("app") / "server.log"
    log = open(log_path, "w")  # noqa: SIM115 (a file, not a pipe nobody reads, which would fill and block the app)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / "app.py"), "--port", str(port)],
                            cwd=log_path.parent, env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the app exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(url, timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("the app did not serve within 300 s")
                time.sleep(1)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_a_port_in_use_ends_in_one_line(tmp_path):
    """A port another program listens on: one `app.py: error:` line naming it, exit status 2, not Gradio's
    traceback."""
    require("gradio")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "app.py"), "--port", str(port)], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert last.startswith(f"app.py: error: cannot serve on 127.0.0.1:{port}: "), last


def test_the_readmes_api_example(server):
    """The README's gradio_client example, run against the served page, prints what its comment says."""
    require("gradio_client")
    url, _ = server
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"\*\*Demo\*\*.*?```python\n(.*?)```", readme, re.S).group(1)
    *lines, last = code.replace("http://127.0.0.1:7860/", url).strip().splitlines()
    expression, shown = last.split("  # ")
    scope = {}
    exec("\n".join(lines), scope)
    assert repr(eval(expression, scope)) == shown


def test_the_app_started_outside_the_checkout_serves_its_default_folder(server):
    """`python examples/app.py` started in another folder: its default --model is the checkout's folder, not one
    relative to where it was started (which failed with "is not a model folder this page serves")."""
    client_module = require("gradio_client")
    url, _ = server
    result = client_module.Client(url, verbose=False).predict(PROMPT, api_name="/generate")  # the default folder
    assert result["folder"] == COPYING and result["words"]


def test_the_api_answers_with_the_pages_numbers(server):
    """/generate and /score give what the page shows, and a bad input is answered with its message."""
    client_module = require("gradio_client")
    url, _ = server
    client = client_module.Client(url, verbose=False)
    result = client.predict(PROMPT, COPYING, "greedy", 20, api_name="/generate")
    assert len(result["words"]) == 20 and result["text"]
    for w in result["words"]:
        assert w["vocabulary"] + w["pointer"] == pytest.approx(w["probability"], abs=1e-5)
        assert 0 <= w["gate"] <= 1 and w["window"] and w["top"]
    scored = client.predict("The Kestrelwind sailed. The Kestrelwind sank.", api_name="/score")
    assert scored["perplexity"] > 1 and 0 < scored["unseen_word_rate"] < 1
    with pytest.raises(Exception, match="max_new_tokens must be"):
        client.predict(PROMPT, COPYING, "greedy", 1000, api_name="/generate")


def test_in_a_real_browser(server, tmp_path):
    url, proc = server
    sync_api = require("playwright.sync_api")
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("Debian's Chromium is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip("needs Debian's Chromium: apt-get install chromium")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(url)
            drive(page, sync_api.expect, tmp_path)
        finally:
            browser.close()
    assert proc.poll() is None  # the server kept serving


def pick_folder(page, folder):
    box = page.locator("#folder input")
    box.fill(folder)
    box.press("Enter")
    box.blur()


def generate(page):
    page.locator("#generate").click()
    page.wait_for_function("document.querySelector('#gen-status').innerText.includes('words in')"
                           " || document.querySelector('#gen-status .ps-msg') !== null")  # fmt: skip


def upload(page, expect, path):
    page.locator("#score-file input[type=file]").set_input_files(str(path))
    expect(page.locator("#score-file")).to_contain_text(path.stem)  # landed


def drive(page, expect, tmp_path):
    page.wait_for_selector("#prompt textarea")
    pick_folder(page, COPYING)
    expect(page.locator("#loaded")).to_contain_text(f"Loaded {COPYING}")
    page.locator("#prompt textarea").fill(PROMPT)
    generate(page)
    words = page.locator("#continuation .w")
    assert words.count() >= 10, page.locator("#gen-status").inner_text()
    copied = page.locator("#continuation .w.unseen.copied")
    assert copied.count() >= 1, "the copying folder copied no unseen word"
    name = copied.first.inner_text()
    assert name == "Kestrelwind"  # written as spelled, not as a placeholder
    copied.first.click()
    moment = page.locator("#moment")
    expect(moment).to_contain_text(f"{name}: p = ")
    expect(moment).to_contain_text("gate g = ")
    window = moment.locator(".ps-window span")
    assert window.count() >= 15 and name in window.all_inner_texts()
    g = float(re.search(r"gate g = ([0-9.]+)", moment.inner_text()).group(1))
    assert 0 <= g <= 1
    expect(page.locator("#compare")).to_contain_text("wt2-lstm-2x200", timeout=60_000)
    page.screenshot(path=SCREENSHOT if os.environ.get("UPDATE_SCREENSHOT") else tmp_path / "app.png", full_page=True)

    # bad inputs: each answered by a message in the page
    status = page.locator("#gen-status .ps-msg")
    page.locator("#prompt textarea").fill("")
    generate(page)
    expect(status).to_contain_text("The prompt is empty")
    page.locator("#prompt textarea").fill(PROMPT)
    page.locator("#max_new_tokens input").fill("5000")
    generate(page)
    expect(status).to_contain_text("max_new_tokens must be")
    page.locator("#max_new_tokens input").fill("20")
    pick_folder(page, "examples")
    expect(page.locator("#loaded .ps-msg")).to_contain_text("is not a model folder")
    generate(page)
    expect(status).to_contain_text("is not a model folder")
    pick_folder(page, COPYING)
    expect(page.locator("#loaded")).to_contain_text(f"Loaded {COPYING}")

    page.get_by_role("tab", name="Score").click()
    score_status = page.locator("#score-status .ps-msg")
    page.locator("#score-text textarea").fill("word " * 10_000)
    page.locator("#score").click()
    expect(score_status).to_contain_text("10,000 words")
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    upload(page, expect, binary)
    page.locator("#score").click()
    expect(score_status).to_contain_text("is not a text file")

    # still serving: a good upload scores, a word of it opens its moment, and Generate works again
    text = tmp_path / "text.txt"
    text.write_text("The Kestrelwind sailed to Norway. The Kestrelwind was sunk in 1940.")
    page.locator("#score-file button[aria-label='Clear']").click()
    upload(page, expect, text)
    page.locator("#score").click()
    expect(page.locator("#score-out")).to_contain_text("perplexity")
    page.locator("#score-out .w").nth(9).click()
    expect(page.locator("#score-moment")).to_contain_text("gate g = ")
    page.get_by_role("tab", name="Generate").click()
    generate(page)
    expect(page.locator("#gen-status")).to_contain_text("20 words in")
