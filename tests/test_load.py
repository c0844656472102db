"""The page under load, small (benchmarks/load.py's round, no timing asserts): two gradio_client users at once, each
streaming a 3-word continuation of a prompt that holds a made-up name of its own and scoring a text that holds it: no
request fails and neither answer holds the other user's name. Requests run at once (the queue's concurrency), so
sampling draws from a generator of each request's own: two sampled at once give the tokens each gives alone, the ones
`torch.manual_seed(seed)` and `generate(do_sample=True)` give."""

import importlib
import importlib.util
import os
import subprocess
import tempfile
import threading

import pytest
import torch
from conftest import ROOT
from test_app import app, require  # the page, or a skip (under CI a missing gradio fails)

# by its path: benchmarks/ on sys.path would put benchmarks/app.py in the page's place
_spec = importlib.util.spec_from_file_location("benchmarks_load", ROOT / "benchmarks" / "load.py")
load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(load)


@pytest.fixture(scope="module")
def url():
    require("gradio_client")
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)  # noqa: SIM115 (the app writes it)
    proc = load.serve(load.free_port(), log, ["--concurrency", "2"])
    try:
        yield f"http://127.0.0.1:{proc.args[proc.args.index('--port') + 1]}/"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        os.unlink(log.name)


def test_two_users_at_once_neither_fails_nor_crosses(url):
    """Each user's stream and answer: 3 whole words, no error; its scored words hold its own name (so a crossing
    would be seen) and neither user's answers hold the other's name."""
    records = load.run_round(url, 2, load.corpus(), timeout=120, words=3, score_words=60)
    for r in records:
        assert not r["errors"], r["errors"]
        assert r["words"] == 3 and r["first"] <= r["last"]
        assert r["name"] in r["scored"]
        assert not r["crossed"], r["crossed"]
    assert load.crossings({**records[0], "text": f"and {records[1]['name']} said"}, load.NAMES[:2])  # it sees one


@torch.no_grad()
def test_sampling_at_once_draws_as_each_alone():
    """Two sampled continuations generated in threads at once (different seeds) are the ones each gives alone, and
    the ones torch.manual_seed + generate(do_sample=True, top_k, temperature) give: no draw from the other's
    generator or from torch's global one."""
    torch.set_num_threads(1)
    models = app.Models()
    model, tok = models.get(app.DEFAULT_MODEL)
    settings = ("sample", 12, 0.9, 40, 1.0, 4)

    def run(seed):  # each whole word's ids
        *_, (_, words, _, _) = app.generate_words(models, app.DEFAULT_MODEL, app.PROMPT, *settings, seed)
        return [r["ids"] for r in words]

    alone = {seed: run(seed) for seed in (3, 4)}
    together, threads = {}, []
    for seed in (3, 4):
        threads.append(threading.Thread(target=lambda s=seed: together.__setitem__(s, run(s))))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone and alone[3] != alone[4]
    ids = torch.tensor([tok(app.PROMPT)["input_ids"]])
    for seed in (3, 4):
        torch.manual_seed(seed)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=True, top_k=40,
                             temperature=0.9, top_p=1.0)[0, ids.shape[1] :].tolist()  # fmt: skip
        written = [i for w in alone[seed] for i in w]
        assert written == out[: len(written)]
