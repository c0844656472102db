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
COPYING = "pretrained/wt2-pointer-sentinel-lstm-2x200"  # the page's default folder: it copies (and spells) unseen words
PROMPT_DEFAULT = "\nThe Quarrington River flows through Esselbrook. In 1850, the town of Esselbrook"  # app.PROMPT
PROMPT = "\nThe ship Kestrelwind sailed to Norway. The Kestrelwind was sunk in 1940. The"
PLAIN = "pretrained/wt2-lstm-2x200"
# the page's own prompt sampled (top_k 40) with seed 22: the pointer folder coins `Mernold`, then copies it
COINING_SEED, COINED = "22", "Mernold"
NAMES = (
    "Tarrabee's house at Brindlemoor stood by the Quell. Tarrabee sold Brindlemoor in 1910, and the Quell flooded it."
)
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
        yield url, proc, log_path
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
    url, *_ = server
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
    url, *_ = server
    result = client_module.Client(url, verbose=False).predict(PROMPT, api_name="/generate")  # the default folder
    assert result["folder"] == COPYING and result["words"]


def test_the_api_answers_with_the_pages_numbers(server):
    """/generate and /score give what the page shows, and a bad input is answered with its message."""
    client_module = require("gradio_client")
    url, *_ = server
    client = client_module.Client(url, verbose=False)
    result = client.predict(PROMPT, COPYING, "greedy", 20, api_name="/generate")
    assert 10 < sum(len(w["ids"]) for w in result["words"]) <= 20 and result["text"]  # 20 tokens, a word in bytes
    for w in result["words"]:
        assert w["vocabulary"] + w["pointer"] + w["speller"] == pytest.approx(w["probability"], abs=1e-5)
        assert 0 <= w["gate"] <= 1 and w["window"] and w["top"]
    scored = client.predict("The Kestrelwind sailed. The Kestrelwind sank.", api_name="/score")
    assert scored["perplexity"] > 1 and 0 < scored["unseen_word_rate"] < 1
    with pytest.raises(Exception, match="max_new_tokens must be"):
        client.predict(PROMPT, COPYING, "greedy", 1000, api_name="/generate")


def test_in_a_real_browser(server, tmp_path):
    url, proc, log_path = server
    start = len(log_path.read_text())  # the API's gr.Error before, which Gradio logs with its trace, is not the page's
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
    assert "Traceback" not in log_path.read_text()[start:]  # every bad input was a message, none a failure


def pick_folder(page, folder):
    box = page.locator("#folder input")
    box.fill(folder)
    box.press("Enter")
    box.blur()


# the run whose last render the page shows, or null: its final status ("… words in … s") and its comparison with the
# twin, both stamped with the run
FINISHED_RUN = """() => { const s = document.querySelector('#gen-status .ps-status');
    const twin = document.querySelector('#compare table');
    const done = s && twin && s.innerText.includes('words in') && twin.dataset.run === s.dataset.run;
    return done ? s.dataset.run : null; }"""


def generate(page):
    """Click Generate and wait for this click's answer to end: a new message, or a new run's final status and its
    comparison with the twin, the event's last render (the status keeps the last answer's text while the next one
    loads). A click while the button's event still runs waits for it (`trigger_mode="always_last"`), so the next click
    waits for that last render."""
    last = """() => { const s = document.querySelector('#gen-status');
        const run = s.querySelector('.ps-status'), msg = s.querySelector('.ps-msg');
        return [run ? run.dataset.run + run.innerText : '', msg ? msg.innerText : '']; }"""
    before = page.evaluate(last)
    page.locator("#generate").click()
    page.wait_for_function(f"""(before) => {{ const [run, msg] = ({last})();
        return (run !== before[0] && ({FINISHED_RUN})() !== null) || (msg !== '' && msg !== before[1]); }}""",
                           arg=before)  # fmt: skip


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
    expect(moment).to_contain_text(f"{name} (copy): p = ")
    expect(moment).to_contain_text("gate g = ")
    window = moment.locator(".ps-window span")
    assert window.count() >= 15 and name in window.all_inner_texts()
    expect(moment.locator(".ps-window")).to_contain_text("sailed to Norway. The Kestrelwind")  # running text
    g = float(re.search(r"gate g = ([0-9.]+)", moment.inner_text()).group(1))
    assert 0 <= g <= 1
    expect(page.locator("#compare")).to_contain_text("wt2-lstm-2x200", timeout=60_000)
    page.screenshot(path=SCREENSHOT if os.environ.get("UPDATE_SCREENSHOT") else tmp_path / "app.png", full_page=True)

    # a click while a run streams is not lost: it runs when that run ends (two finished runs, the last one the click's)
    finished = f"""(seen) => {{ const run = ({FINISHED_RUN})();
        if (run !== null) (window.finishedRuns ??= new Set(seen)).add(run);
        return window.finishedRuns && window.finishedRuns.size >= seen.length + 2; }}"""
    seen = [page.locator("#gen-status .ps-status").get_attribute("data-run")]
    page.locator("#prompt textarea").fill(PROMPT_DEFAULT)
    page.locator("#max_new_tokens input").fill("150")
    page.locator("#generate").click()
    page.locator("#prompt textarea").fill(PROMPT)
    page.locator("#max_new_tokens input").fill("20")
    page.locator("#generate").click()
    page.wait_for_function(finished, arg=seen, timeout=60_000, polling=20)
    assert page.locator("#continuation .w.unseen.copied", has_text="Kestrelwind").count() >= 1

    # coining: sampled, the model spells a word new to the text and the vocabulary, then copies it
    prompt = page.locator("#prompt textarea").input_value()
    page.locator("#prompt textarea").fill(PROMPT_DEFAULT)
    page.locator("#mode input[value=sample]").check()
    page.locator("#max_new_tokens input").fill("60")
    page.locator("#seed input").fill(COINING_SEED)
    generate(page)
    coined = page.locator("#continuation .w.coined")
    assert coined.count() >= 1 and COINED in coined.all_inner_texts(), page.locator("#continuation").inner_text()
    copies = page.locator("#continuation .w.copied", has_text=COINED)
    assert copies.count() >= 1, "the coined word was not copied"
    coined.filter(has_text=COINED).first.click()
    expect(moment).to_contain_text(f"{COINED} (new): p = ")
    speller = float(re.search(r"\+ speller ([0-9.e-]+)", moment.inner_text()).group(1))
    assert speller > 0 and "pointer share 0.0%" in moment.inner_text()
    copies.first.click()
    expect(moment).to_contain_text(f"{COINED} (copy): p = ")
    assert float(re.search(r"pointer share ([0-9.]+)%", moment.inner_text()).group(1)) >= 50
    expect(moment.locator("table")).to_contain_text("(a new word)")  # the speller's share among the top next words
    page.locator("#mode input[value=greedy]").check()
    page.locator("#seed input").fill("0")
    page.locator("#prompt textarea").fill(prompt)

    # a plain folder says it has no pointer and is compared with its pointer twin
    pick_folder(page, PLAIN)
    expect(page.locator("#loaded")).to_contain_text("no pointer")
    generate(page)
    expect(page.locator("#moment")).to_contain_text("no pointer")
    assert "gate g" not in page.locator("#moment").inner_text()
    expect(page.locator("#compare")).to_contain_text(COPYING, timeout=60_000)
    pick_folder(page, COPYING)
    expect(page.locator("#loaded")).to_contain_text(f"Loaded {COPYING}")

    # bad inputs: each answered by a message in the page, the last output cleared
    status = page.locator("#gen-status .ps-msg")
    for seed, said in (("1e30", "seed must be a whole number in [0, 4,294,967,295], got 1e+30"),
                       ("3.7", "seed must be a whole number in [0, 4,294,967,295], got 3.7"),
                       ("", "seed is empty")):  # fmt: skip
        page.locator("#seed input").fill(seed)
        generate(page)
        expect(status).to_contain_text(said)
        assert page.locator("#continuation .w").count() == 0 and page.locator("#moment").inner_text().strip() == ""
    page.locator("#seed input").fill("0")
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
    # made-up names pasted: running text, and the pointer helped most on their repeats
    page.locator("#score-text textarea").fill(NAMES)
    page.locator("#score").click()
    expect(page.locator("#score-out")).to_contain_text(
        "Tarrabee's house at Brindlemoor stood by the Quell. Tarrabee", timeout=60_000
    )
    helped = page.locator("#score-out .ps-helped tr td:first-child").all_inner_texts()
    assert helped and set(helped[:3]) <= {"Tarrabee", "Brindlemoor", "Quell"}, helped
    page.locator("#score-text textarea").fill("word " * 10_000)
    page.locator("#score").click()
    expect(score_status).to_contain_text("10,000 words", timeout=60_000)
    expect(page.locator("#score-out")).to_have_text("")  # the last text's scores are gone
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
    expect(page.locator("#gen-status")).to_contain_text(" words in ")
