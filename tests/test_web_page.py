"""examples/export_web.py's static site, served by `python -m http.server` and driven in Debian's Chromium by
Playwright (never a browser download; .ci/run installs Chromium, Node.js and npm).

One export of the smallest pointer folder (PTB, int8 and fp32) and one page for the whole module. In the page: the JS
tokenizer's ids against the Python tokenizer's on 2,000 lines (both folders' text rules); greedy tokens against
PyTorch's `generate`, and each word's pointer share and gate against examples/app.py's (`inspection.explain`), on the
fp32 graphs; the page's own controls (a continuation, a word's moment, the bad-input messages); the request log (no
request outside the served folder) and a reload offline. benchmarks/web.py runs the full 10 prompts x 50 words and
times the page. `UPDATE_SCREENSHOT=1` writes the README's screenshot, results/web/screenshot.png.
"""

import gzip
import importlib
import json
import lzma
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT

CHROMIUM = Path("/usr/bin/chromium")
FOLDER = "pretrained/ptb-pointer-sentinel-lstm-2x200"
NAME = Path(FOLDER).name
WT2 = "pretrained/wt2-pointer-sentinel-lstm-2x200"  # its tokenizer only: the WikiText rules
# Prompts with words the vocabulary lacks (made-up names, spelled in bytes; several make the model copy them) and
# numbers, accents and PTB's own form. The first three run in CI; benchmarks/web.py runs all ten.
PROMPTS = [
    "Tarrabee sold Brindlemoor in 1910 and Tarrabee bought the Quell . Tarrabee said the Quell",
    "\nthe ship Kestrelwind sailed to norway . the Kestrelwind was sunk in 1940 . the",
    "the company said that Zorblaxian met Quentrovia in new york . later Zorblaxian said",
    "\nmr. Kestrelwind the chairman of Brindlemoor inc. said the company 's profit rose 5 %",
    "the Quarrington river flows through Esselbrook . in 1850 the town of Esselbrook",
    "\nshares of Merrowgate corp. fell . Merrowgate said it will sell Merrowgate shares . analysts said Merrowgate",
    "\nZürich-based Nestlé said its café unit had sales of 3.5 billion francs",
    "\nin tokyo the nikkei index of Qxlorp stocks rose 120 points to Qxlorp",
    "\nmr. Vandersloot said the Vandersloot group would buy Ombrix inc. for $ 40 million . Ombrix",
    "\nthe fda approved Zentravil a drug made by Pharmakon . Pharmakon said Zentravil",
]
CI_PROMPTS, WORDS = PROMPTS[:3], 50
SCREENSHOT = ROOT / "results" / "web" / "screenshot.png"


def require(module: str):
    """The module, or a skip; under CI a missing one fails, so CI always runs these tests."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tokenizer_lines(wt2_tokenizer, n: int = 2000, seed: int = 0) -> list[str]:
    """n lines for the tokenizers: WikiText-2 validation detokenized (the WikiText tokenizer's own decoding of the
    bundled split), sentences with made-up names, accents, emoji, PTB-style text (WikiText lines lower-cased,
    numbers as N, punctuation dropped: no PTB text is bundled), and edge cases (line breaks, a spelling token's
    name, long words, URLs, unusual spaces)."""
    rng = random.Random(seed)
    path = ROOT / "modeling_pointer_sentinel" / "data" / "wikitext-2" / "wiki.valid.tokens.xz"
    corpus = [x for x in lzma.open(path, "rt", encoding="utf-8").read().splitlines() if x.strip() and " = " not in x]
    edge = ["", " ", "\n", "a\nb", "a\r\nb\rc", "x</w>y", "<0x41>", "ab<0x41>cd ef", "<eos> <unk> <eos>", "<unk>",
            "don't won't can't", "d'Orsay's", "a -- b--c", "https://example.com/a_b?x=1 mail me@ex.co.uk",
            "3.5% -5.5 1/2 1980s 190.58-point", "the U.S. and Mr. Smith", '"a breakout" hit', "N N n't", "$ 5 million",
            "10:30 3 - 2", "(a) [b] {c}", "a" * 150, "é" * 40, "Zorblaxian" * 9, "\t tab\u00a0nbsp\u2003em\u2028ls",
            "x\ufeffy"]  # fmt: skip
    syllables = ["zor", "bla", "xi", "quen", "tro", "vi", "ka", "mel", "dra", "ess", "el", "brook", "qu", "ar", "wyn"]

    def name():
        return "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))).capitalize()

    names = []
    for _ in range(300):
        a, b = name(), name()
        share = f"{rng.randint(2, 99)}.{rng.randint(0, 9)}%"
        names.append(rng.choice([f"{a} met {b} in {name()}. Later, {a} said {b}'s plan failed.",
                                 f"The {a}-{b} treaty of 1,{rng.randint(100, 999)} ({a}) was signed.",
                                 f'"{a}," said {b}, "is {share} done."']))  # fmt: skip
    accented = ["café", "naïve", "Zürich", "São Paulo", "Dvořák", "Łódź", "Ærøskøbing", "Ångström", "crème brûlée",
                "Nguyễn", "İstanbul", "ΣΟΦΙΑ", "Ὀδυσσεύς", "straße", "MÜNCHEN", "Kraków", "résumé", "Señor Peña",
                "Þórr", "ﬁnance", "Ǆemal", "Москва", "東京", "e\u0301tude", "Ça va"]  # fmt: skip
    accents = [" ".join(rng.sample(accented, rng.randint(2, 6))) + rng.choice([".", ",", "!", " 's", "'s"])
               for _ in range(200)]  # fmt: skip
    emoji = ["❤️", "🍕", "👩‍👩‍👧", "👍🏽", "🇳🇴", "😀", "🚀🚀", "✨", "☕", "🤖"]
    emojis = [f"{name()} {rng.choice(emoji)} said {rng.choice(emoji)}{rng.choice(['', 'hi', ' ok', '!'])} "
              f"{name()}{rng.choice(emoji)}" for _ in range(200)]  # fmt: skip
    ptb = []
    for x in corpus[-200:]:
        x = re.sub(r"\d+(?:\s*@[.,]@\s*\d+)*", "N", x.lower())
        ptb.append(" " + " ".join(re.sub(r"[^\w\s'$&-]| @-@ |@", " ", x).split()[:40]) + " ")
    rest = n - len(edge) - len(names) - len(accents) - len(emojis) - len(ptb)
    wiki = [wt2_tokenizer.decode(wt2_tokenizer(x)["input_ids"]) for x in corpus[:rest]]
    return wiki + names + accents + emojis + ptb + edge


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site as a user builds it, plus what only the tests serve: the WikiText tokenizer's files and a model
    entry whose word step is not an ONNX file."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "export_web.py"), str(ROOT / FOLDER), str(out),
                           "--fp32"], env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    tokenizers = out / "tokenizers" / "wt2"
    tokenizers.mkdir(parents=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / WT2 / f, tokenizers / f)
    listing = json.loads((out / "models.json").read_text())
    broken = shutil.copytree(out / "models" / NAME, out / "models" / "broken")
    (broken / listing["models"][0]["files"]["int8"][0]).write_bytes(gzip.compress(b"not an ONNX file"))
    listing["models"].append({**listing["models"][0], "name": "broken", "path": "models/broken"})
    (out / "models.json").write_text(json.dumps(listing))
    return out


@pytest.fixture(scope="module")
def server(site):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "-d", str(site), "--bind", "127.0.0.1", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("http.server did not serve the site within 60 s")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def browser(server):
    """One page for the module, and every URL it asked for."""
    sync_api = require("playwright.sync_api")
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("/usr/bin/chromium is missing: .ci/run installs it")
        pytest.skip("no /usr/bin/chromium (apt-get install -y chromium)")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        context = chromium.new_context(viewport={"width": 1100, "height": 1000})
        page, requests, errors, first = context.new_page(), [], [], []
        context.on("request", lambda r: requests.append(r.url))  # the service worker's fetches too
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: first.append(r.url))  # the page's own, until its model has loaded
        page.goto(server)
        page.wait_for_function("document.body.dataset.state !== 'loading'", timeout=60_000)
        page.evaluate("window.pointerPage.getModel(document.getElementById('model').value.split('|')[0], 'int8')")
        try:
            yield page, context, requests, errors, list(first)
        finally:
            chromium.close()


def generate(page, prompt: str, words: int, precision: str = "fp32") -> dict:
    return page.evaluate(
        """async ([model, precision, prompt, maxWords]) => {
            const r = await window.pointerPage.generate({model, precision, prompt, maxWords});
            return {tokens: r.tokens, words: r.words.map((w) => ({word: w.word, kind: w.kind, gate: w.gate,
                    share: w.pointer_share, probability: w.probability}))};
        }""",
        [NAME, precision, prompt, words],
    )


def test_the_js_tokenizer_gives_the_python_ids_on_2000_lines(browser):
    """Both text rules (PTB's folder, WikiText's tokenizer): each line's ids, and the text those ids decode to."""
    from transformers import AutoTokenizer

    page = browser[0]
    folders = {f"models/{NAME}": ROOT / FOLDER, "tokenizers/wt2": ROOT / WT2}
    files = {f"models/{NAME}": ["tokenizer.json.gz", "tokenizer_config.json"],  # the site's, gzipped
             "tokenizers/wt2": ["tokenizer.json", "tokenizer_config.json"]}  # fmt: skip
    tokenizers = {d: AutoTokenizer.from_pretrained(str(f), trust_remote_code=True) for d, f in folders.items()}
    lines = tokenizer_lines(tokenizers["tokenizers/wt2"])
    assert len(lines) == 2000
    for folder, tok in tokenizers.items():
        want = tok(lines, add_special_tokens=False)["input_ids"]
        got = page.evaluate(
            """async ([dir, files, lines, ids]) => {
                const tok = await window.pointerPage.loadTokenizer(dir, files);
                return {ids: lines.map((x) => tok.encode(x)), text: ids.map((i) => tok.decode(i))};
            }""",
            [folder, files[folder], lines, want],
        )
        wrong = [(line, a, b) for line, a, b in zip(lines, got["ids"], want, strict=True) if a != b]
        assert not wrong, f"{folder}: {len(wrong)} lines differ, e.g. {wrong[0]}"
        text = [tok.decode(ids) for ids in want]
        wrong = [(a, b) for a, b in zip(got["text"], text, strict=True) if a != b]
        assert not wrong, f"{folder}: {len(wrong)} decodings differ, e.g. {wrong[0]}"


def test_greedy_tokens_gate_and_pointer_share_match_pytorch(browser):
    """On the fp32 graphs, 50 words after each CI prompt: the page's tokens are generate's (examples/app.py's
    continuation, PyTorch's `generate` greedy), and each word's gate and pointer share are app.py's, from
    `inspection.explain`, to 1e-3. The prompts make the model copy a spelled word, so that path is checked too."""
    require("gradio")
    sys.path.insert(0, str(ROOT / "examples"))
    import app

    models, kinds = app.Models(), set()
    for prompt in CI_PROMPTS:
        got = generate(browser[0], prompt, WORDS)
        assert len(got["words"]) == WORDS
        *_, (_, want, _, _) = app.generate_words(models, FOLDER, prompt, mode="greedy",
                                                 max_new_tokens=len(got["tokens"]))  # fmt: skip
        assert got["tokens"] == [i for w in want for i in w["ids"]], prompt
        for mine, theirs in zip(got["words"], want, strict=True):
            assert mine["word"] == theirs["word"]
            assert abs(mine["gate"] - theirs["gate"]) < 1e-3, (prompt, mine, theirs["gate"])
            assert abs(mine["share"] - theirs["pointer_share"]) < 1e-3, (prompt, mine, theirs["pointer_share"])
        kinds |= {w["kind"] for w in got["words"]}
    assert "copy" in kinds, kinds


def test_the_pages_steps_give_forwards_log_p_where_a_spelled_word_repeats_at_once(browser):
    """The page's steps over a text (the fp32 graphs, the word step reading only the ring slots that hold spelled
    words): each next token's log p is the model's forward's, to 1e-4, at every token of a text that repeats a
    spelled word at once and later (the repeat's first byte is a copy of the word just written, whose slot the page
    must give the word step)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ROOT / FOLDER), trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(str(ROOT / FOLDER), trust_remote_code=True).eval()
    ids = tok("the Zorbane Zorbane ship was sunk in the bay . the Zorbane was saved")["input_ids"]
    assert sum(i >= model.config.vocab_size for i in ids) > 20  # spelled bytes
    with torch.no_grad():
        log_p = model(torch.tensor([ids])).logits[0].log_softmax(-1)
    want = [float(log_p[i, ids[i + 1]]) for i in range(len(ids) - 1)]
    got = browser[0].evaluate(
        """async ([name, ids]) => {
            const m = await window.pointerPage.getModel(name, "fp32"), row = m.empty(), out = [];
            for (let i = 0; i + 1 < ids.length; i++) out.push((await m.step(ids[i], row)).at(ids[i + 1]));
            return out;
        }""",
        [NAME, ids],
    )
    worst = max(abs(a - b) for a, b in zip(got, want, strict=True))
    assert worst < 1e-4, (worst, got, want)


def test_sampling_is_seeded_and_top_k_1_is_greedy(browser):
    """Top-k sampling in the page: a seed gives the same continuation again, another seed another one, and top-k 1
    (the one most probable token) gives the greedy continuation."""
    runs = browser[0].evaluate(
        """async ([model, prompt]) => {
            const go = (o) => window.pointerPage.generate({model, prompt, maxWords: 20, ...o}).then((r) => r.tokens);
            return [await go({sample: true, topK: 40, seed: 7}), await go({sample: true, topK: 40, seed: 7}),
                    await go({sample: true, topK: 40, seed: 8}), await go({sample: true, topK: 1, seed: 9}),
                    await go({})];
        }""",
        [NAME, CI_PROMPTS[1]],
    )
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert runs[3] == runs[4]


def test_the_page_streams_a_continuation_and_shows_a_words_moment(browser):
    """The page's own controls: a prompt with unseen names, a greedy continuation coloured word by word, then a
    copied word's moment (its window coloured by attention, the gate, the top next words and their parts)."""
    page = browser[0]
    page.fill("#prompt", CI_PROMPTS[0])
    page.select_option("#mode", "greedy")
    page.fill("#max-words", "25")
    page.click("#generate")
    page.wait_for_function("document.body.dataset.state === 'done'", timeout=120_000)
    words = page.locator("#output .word")
    assert words.count() == 25 and page.inner_text("#message") == ""
    assert "words/s" in page.inner_text("#speed")
    copied = page.locator("#output .word.copy")
    assert copied.count() > 0, page.inner_text("#output")
    copied.first.click()
    page.wait_for_selector("#moment:not([hidden]) #top tbody tr")
    gate = float(page.inner_text("#gate"))
    assert 0 <= gate <= 1
    assert page.locator("#window span").count() > 10
    rows = page.locator("#top tbody tr")
    assert rows.count() == 10
    cells = [c.split("\t") for c in page.locator("#top tbody tr").all_inner_texts()]
    assert any(float(c[3]) > 0 for c in cells), cells  # the copied word's pointer part
    if os.environ.get("UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)


def test_bad_input_gets_a_message_in_the_page(browser):
    """An empty prompt, a prompt over the limit and a model file that fails to load: a message in the page, never
    an exception; then the page generates again."""
    page = browser[0]

    def message_after(prompt: str, model: str | None = None) -> str:
        page.fill("#prompt", prompt)
        if model:
            page.select_option("#model", model)
        page.click("#generate")
        page.wait_for_function("['done', 'error'].includes(document.body.dataset.state)", timeout=60_000)
        return page.inner_text("#message")

    page.evaluate("document.body.dataset.state = 'busy'")
    assert message_after("   ").startswith("The prompt is empty")
    page.evaluate("document.body.dataset.state = 'busy'")
    assert "the page takes at most 1,000" in message_after("word " * 1001)
    page.evaluate("document.body.dataset.state = 'busy'")
    assert "failed to load" in message_after("the company said", "broken|int8")
    page.evaluate("document.body.dataset.state = 'busy'")
    page.fill("#max-words", "3")
    assert message_after("the company said", f"{NAME}|int8") == ""
    assert page.locator("#output .word").count() == 3
    assert not browser[3], browser[3]  # no uncaught exception in the page


def test_no_request_leaves_the_served_folder_and_the_page_works_offline(browser, server):
    """Every request the page made (its service worker's included) is for the served folder; once the service worker
    holds the site, a reload with the network off still loads and generates."""
    page, context, requests, *_ = browser
    assert requests and all(u.startswith(server) for u in requests), [u for u in requests if not u.startswith(server)]
    page.evaluate("navigator.serviceWorker.ready.then(() => true)")
    context.set_offline(True)
    try:
        page.reload()
        page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
        got = generate(page, "the company said", 3, "int8")
        assert len(got["words"]) == 3
    finally:
        context.set_offline(False)


def test_export_web_refuses_bad_folders_in_one_line(tmp_path):
    """A path that is no model folder, and a folder without a speller: one `export_web.py: error:` line, exit 2,
    before torch is loaded."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"model_type": "pointer_sentinel_lstm", "speller_size": 0}))
    for folder, says in ((tmp_path / "missing", "not a model folder"), (plain, "this one has none")):
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "export_web.py"), str(folder),
                               str(tmp_path / "out")], capture_output=True, text=True, timeout=120)  # fmt: skip
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr
        assert lines[0].startswith("export_web.py: error:")


def test_npm_ci_is_skipped_while_node_modules_matches_the_lockfile(site, monkeypatch):
    """After the site's export, web/node_modules holds the locked versions: the next export runs no npm (here npm
    cannot be found, which would be an error if it were run) and finds the runtime's three files."""
    sys.path.insert(0, str(ROOT / "examples"))
    import export_web

    monkeypatch.setattr(shutil, "which", lambda name: None)
    dist = export_web.npm_ci()
    assert all((dist / f).is_file() for f in export_web.ORT_FILES)


def site_graph(site, name: str):
    """One of the site's gzipped graphs (its weights external, not loaded)."""
    import onnx

    return onnx.load_from_string(gzip.decompress((site / "models" / NAME / name).read_bytes()))


def test_the_site_sends_the_model_files_gzipped_within_the_size_goal(site):
    """What a browser downloads for the PTB model as `python -m http.server` sends it (no compression of its own):
    the graphs, their weights and the tokenizer gzipped by export_web.py, and the int8 files within 3 MB."""
    entry = json.loads((site / "models.json").read_text())["models"][0]
    folder = site / "models" / NAME
    assert all(f.endswith(".gz") for f in [*entry["files"]["int8"], *entry["files"]["fp32"], entry["tokenizer"][0]])
    assert not [f.name for f in folder.iterdir() if f.suffix in (".onnx", ".bin") or f.name == "tokenizer.json"]
    for f in [*entry["files"]["int8"], entry["tokenizer"][0]]:
        gzip.decompress((folder / f).read_bytes())  # a gzip file, whole
    sent = sum(f.stat().st_size for f in folder.iterdir() if f.name not in entry["files"]["fp32"])
    assert sent <= 3_000_000, sent


def test_the_page_graphs_are_the_steps_made_lighter(site):
    """export_web.py's forms of the steps (export_web.page_graph): one row; the int8 matrices are int8 with a
    DequantizeLinear (folded to float32 at load) and no dynamic quantization; the last hidden state feeds one Gemm
    (export_onnx.fuse_shared_gemms); no bool cast to a number for any/all (export_onnx.bool_reductions); the word step
    gives no window ring back (the page moves it), reads the slots it is given (`held_slots`, of any number) and
    holds the mixture's decoding form; the byte step's window has a dynamic length and its log p is the 258 symbol
    columns."""
    from onnx import TensorProto

    sys.path.insert(0, str(ROOT / "examples"))
    import export_web

    word, byte = site_graph(site, "decode_step.int8.onnx.gz"), site_graph(site, "spell_step.int8.onnx.gz")
    for graph in (word.graph, byte.graph):
        ops = [n.op_type for n in graph.node]
        assert "DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops and "DequantizeLinear" in ops
        big = [i for i in graph.initializer if len(i.dims) == 2 and i.dims[0] * i.dims[1] >= 4096]
        assert big and all(i.data_type == TensorProto.INT8 for i in big), [(i.name, i.data_type) for i in big]
        made = {o: n for n in graph.node for o in n.output}
        casts = [n for n in graph.node if n.op_type in ("ReduceMax", "ReduceMin") and n.input[0] in made
                 and made[n.input[0]].op_type == "Cast"]  # fmt: skip
        assert not casts, [n.name for n in casts]
        assert all(d.dim_value == 1 for v in graph.input if v.type.tensor_type.shape.dim and v.name != "held_slots"
                   for d in v.type.tensor_type.shape.dim[:1]), "the batch is one row"  # fmt: skip
    last = next(v.name for v in word.graph.output if v.name.startswith("hidden.") and v.name.endswith(".out")
                and not any(w.name > v.name for w in word.graph.output if w.name.startswith("hidden.")))  # fmt: skip
    assert [n.op_type for n in word.graph.node if last in n.input].count("Gemm") == 1
    assert not {v.name.removesuffix(".out") for v in word.graph.output} & set(export_web.RING)
    window = next(v for v in byte.graph.input if v.name == "window_spellings").type.tensor_type.shape.dim
    assert window[1].dim_param and not window[1].dim_value, window
    held = next(v for v in word.graph.input if v.name == "held_slots").type.tensor_type.shape.dim
    assert len(held) == 1 and held[0].dim_param and not held[0].dim_value, held
    # traced without autograd: the mixture's decoding form, not training's (whose first-copy mask is a Trilu)
    assert "Trilu" not in {n.op_type for n in word.graph.node}
    # the ring written at its slot and the held slots read along L (`ring_write`'s scatter, index_select): no
    # window-sized tensor transposed around a ScatterND or GatherND at every step; a weight's transpose is folded
    made = {o: n for n in word.graph.node for o in n.output}
    moved = [n.name for n in word.graph.node if n.op_type in ("ScatterND", "GatherND") or n.op_type == "Transpose"
             and getattr(made.get(n.input[0]), "op_type", None) != "DequantizeLinear"]  # fmt: skip
    assert not moved, moved
    log_p = next(v for v in byte.graph.output if v.name == "log_probs").type.tensor_type.shape.dim
    assert log_p[-1].dim_value == export_web.SPELL_SYMBOLS


def test_the_page_reads_int8_weights_as_float32_and_starts_the_runtime_at_once(browser):
    """The page's session options fold the int8 weights into float32 at load (`disable_quant_qdq`: its float32
    products are faster than its int8 ones); on the first load it asks for the runtime's wasm before the model's
    graphs (a one-node session made at once), so that the runtime compiles while the model files come."""
    page, first = browser[0], browser[4]
    options = page.evaluate("import('./runner.js').then((m) => m.SESSION_OPTIONS)")
    assert options["extra"]["session"]["disable_quant_qdq"] == "1" and options["executionProviders"] == ["wasm"]
    runtime = next(i for i, u in enumerate(first) if u.endswith("ort-wasm-simd-threaded.mjs"))
    graphs = next(i for i, u in enumerate(first) if "step.int8.onnx" in u)
    assert runtime < graphs, first
