import itertools
import json
import math
import types

import pytest
import torch
from conftest import evaluate_script, evaluation_files, tiny_model

from modeling_pointer_sentinel.evaluation import (
    NeuralCache,
    StreamOutputs,
    bracketed_grid,
    bucket_log_ppl_difference,
    cache_grid_search,
    collect_outputs,
    frequency_buckets,
    gate_statistics,
    neural_cache_loop_reference,
    unknown_penalised_perplexity,
)
from modeling_pointer_sentinel.plotting import (
    plot_bucket_differences,
    plot_gate_histogram,
    pointer_picture_positions,
    pointer_window_picture,
)
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer


@pytest.mark.parametrize("window,chunk", [(3, 4), (7, 5), (50, 8), (1, 3)])
def test_neural_cache_equals_per_token_loop(window, chunk):
    g = torch.Generator().manual_seed(window)
    h = torch.randn(2, 23, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (2, 23), generator=g)
    lp = -torch.rand(2, 23, generator=g, dtype=torch.float64) * 3
    want = neural_cache_loop_reference(h, y, lp, window, 0.7, 0.3)
    cache = NeuralCache(window, 0.7, 0.3, chunk=chunk)
    got = torch.cat([cache(h[:, :10], y[:, :10], lp[:, :10]), cache(h[:, 10:], y[:, 10:], lp[:, 10:])], 1)
    torch.testing.assert_close(got, want)
    assert torch.equal(got[:, 0], lp[:, 0])  # empty cache at the first token: the model alone


def test_neural_cache_uses_next_token_alignment():
    h = torch.ones(1, 3, 2)  # identical states: the cache is uniform over earlier positions
    y = torch.tensor([[5, 9, 5]])  # x_1 = 5, x_2 = 9, x_3 = 5 are the tokens after positions 0, 1, 2
    lp = torch.full((1, 3), -10.0)
    mixed = NeuralCache(10, 1.0, 1.0)(h, y, lp)  # lambda 1: the cache alone
    assert mixed[0, 1].item() == -math.inf  # position 1 predicts 9; the cache holds only h_0 -> 5
    assert mixed[0, 2].item() == pytest.approx(math.log(0.5))  # position 2 predicts 5: one of two keys


def test_bad_cache_settings_raise():
    with pytest.raises(ValueError):
        NeuralCache(window=0)
    with pytest.raises(ValueError):
        NeuralCache(lam=1.5)


def test_collected_perplexity_equals_model_loss():
    model = tiny_model().eval()
    streams = torch.randint(0, 6, (2, 41))
    outs = collect_outputs(model, streams, bptt=7, keep_hidden=True)
    whole = model(streams[:, :-1], shift_labels=streams[:, 1:])
    assert outs.perplexity() == pytest.approx(math.exp(whole.loss.item()), rel=1e-5)
    vocab = torch.nn.functional.cross_entropy(whole.vocab_logits.transpose(1, 2), streams[:, 1:])
    assert outs.perplexity(pointer=False) == pytest.approx(math.exp(vocab.item()), rel=1e-5)
    assert outs.hidden.shape == (2, 40, 12)
    torch.testing.assert_close(outs.gate, whole.gate)
    progress = types.SimpleNamespace(n=0)
    progress.update = lambda k: setattr(progress, "n", progress.n + k)
    rows = cache_grid_search(outs, windows=[5, 20], thetas=[0.5], lambdas=[0.0, 0.2], progress=progress)
    assert progress.n == 4  # one update per grid point, for a progress bar
    assert sorted((r["window"], r["lam"]) for r in rows) == [(5, 0.0), (5, 0.2), (20, 0.0), (20, 0.2)]
    for r in rows:  # each row's perplexity, recomputed with the per-token loop reference
        ref = neural_cache_loop_reference(outs.hidden, outs.targets, outs.log_probs, r["window"], 0.5, r["lam"])
        assert r["ppl"] == pytest.approx(math.exp(-ref.double().mean().item()), rel=1e-4)
    no_cache = [r["ppl"] for r in rows if r["lam"] == 0.0]
    assert all(p == pytest.approx(outs.perplexity(), rel=1e-6) for p in no_cache)


def test_frequency_buckets_are_equal_sized_and_ordered_by_frequency():
    train = torch.tensor([0] * 50 + [1] * 20 + [2] * 5 + [3])
    targets = torch.tensor([[3, 0, 1, 2, 0, 0, 1, 3, 2, 0]])
    b = frequency_buckets(train, targets, n_buckets=5)
    assert torch.bincount(b.flatten()).tolist() == [2, 2, 2, 2, 2]
    counts = torch.bincount(train)
    freq = counts[targets.flatten()]
    for k in range(4):  # every target of a bucket is at least as frequent as any of the next bucket
        assert freq[b.flatten() == k].min() >= freq[b.flatten() == k + 1].max()
    diffs = bucket_log_ppl_difference(torch.zeros(1, 10), -torch.ones(1, 10), b, 5)
    assert diffs == [1.0] * 5


def test_gate_statistics_and_pictures(tmp_path):
    import matplotlib.pyplot as plt

    tok = build_word_level_tokenizer(["a b c a b c d", "e f a"])
    model = tiny_model(vocab_size=len(tok)).eval()
    ids = torch.tensor(tok("a b c a b c d e f a b c")["input_ids"])
    outs = collect_outputs(model, ids[None], bptt=5)
    stats = gate_statistics(outs, tok, min_count=1)
    assert stats["mean_gate"] == pytest.approx(outs.gate.mean().item())
    # the pointer's share of p(y), recomputed from a whole-sequence forward: 1 - g p_vocab(y) / p(y)
    whole = model(ids[None, :-1])
    y = ids[None, 1:, None]
    p_mix = whole.logits.exp().gather(-1, y)[..., 0]
    p_vocab = torch.softmax(whole.vocab_logits, -1).gather(-1, y)[..., 0]
    share = 1 - whole.gate * p_vocab / p_mix
    assert stats["mean_pointer_share_of_target_prob"] == pytest.approx(share.mean().item(), rel=1e-4)
    assert stats["top_pointer_words"][0][1] == pytest.approx(
        max(share[ids[None, 1:] == w].mean().item() for w in ids[1:].unique()), abs=1e-3
    )
    plot_gate_histogram(outs, tmp_path / "gate.png")
    plot_bucket_differences([0.1, -0.05, 0.3], tmp_path / "buckets.png")
    info = pointer_window_picture(model, tok, ids, 9, tmp_path / "window.png", tmp_path / "window.html")
    assert info["actual"] == "b" and len(info["attention"]) == model.config.pointer_window
    assert info["gate"] + sum(info["attention"]) == pytest.approx(1.0, abs=1e-5)
    for name in ("gate.png", "buckets.png", "window.png"):
        assert plt.imread(tmp_path / name).shape[0] > 100
    assert "<span" in (tmp_path / "window.html").read_text()


def test_evaluate_script_end_to_end(tmp_path, capsys):
    main = evaluate_script()
    lines, tok, files = evaluation_files(tmp_path, 20)
    for name, seed in (("a", 0), ("b", 1)):
        tiny_model(seed=seed, vocab_size=len(tok)).save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    res = main([str(tmp_path / "a"), *files, "--batch_size", "2", "--cache_grid", "--compare", str(tmp_path / "b"),
                "--plots", str(tmp_path / "plots"), "--output_json", str(tmp_path / "r.json")])  # fmt: skip
    n_tokens = sum(len(line.split()) + 1 for line in (tmp_path / "test.txt").read_text().splitlines())
    assert res["tokens"] == 2 * (n_tokens // 2 - 1)  # two streams, every target once
    best = res["cache_grid_best_on_validation"]
    assert (res["cache"]["window"], res["cache"]["theta"], res["cache"]["lam"]) == (
        best["window"],
        best["theta"],
        best["lam"],
    )
    assert best["ppl"] == min(r["ppl"] for r in res["cache_grid"])
    assert res["ppl_with_cache"] != pytest.approx(best["ppl"], rel=1e-3)  # the test split is another text
    assert len(res["compare"]["bucket_log_ppl_gain"]) == 10
    for name in ("gate_histogram.png", "frequency_buckets.png", "pointer_0.png", "pointer_0.html"):
        assert (tmp_path / "plots" / name).stat().st_size > 0
    # the terminal gets a short summary, the JSON file everything
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(res))
    out, err = capsys.readouterr()
    assert "{" not in out and len(out.splitlines()) <= 12, out
    c = res["cache"]
    chosen = f"window {c['window']}, θ {c['theta']}, λ {c['lam']}"
    assert chosen in out
    for value in (res["ppl"], res["ppl_pointer_off"], best["ppl"], res["ppl_with_cache"], res["compare"]["ppl"]):
        assert f"{value:.2f}" in out
    n = len(res["cache_grid"])  # 36 asked for, and any grown past an edge choice
    assert "cache grid (validation)" in err and f"{n}/{n}" in err and n >= 36  # a progress bar over the grid points
    # the grid is searched on validation: a run that scores the validation split finds the same grid, and its own
    # perplexity with the cache is the grid's best
    on_valid = main([str(tmp_path / "a"), *files, "--batch_size", "2", "--cache_grid", "--split", "validation"])
    assert on_valid["cache_grid"] == res["cache_grid"]
    assert on_valid["ppl_with_cache"] == pytest.approx(best["ppl"], rel=1e-9)


def test_evaluate_script_cache_grid_is_the_one_asked_for(tmp_path, capsys):
    main = evaluate_script()
    _, tok, files = evaluation_files(tmp_path, 20)
    tiny_model(vocab_size=len(tok)).save_pretrained(tmp_path / "a")
    tok.save_pretrained(tmp_path / "a")
    res = main([str(tmp_path / "a"), *files, "--batch_size", "2", "--cache_grid", "--cache_grid_windows", "3", "7",
                "--cache_grid_thetas", "0.5", "--cache_grid_lambdas", "0", "0.25",
                "--grid_extensions", "0"])  # fmt: skip
    points = {(r["window"], r["theta"], r["lam"]) for r in res["cache_grid"]}
    assert points == {(3, 0.5, 0.0), (3, 0.5, 0.25), (7, 0.5, 0.0), (7, 0.5, 0.25)} and len(res["cache_grid"]) == 4
    assert "4/4" in capsys.readouterr().err


def test_evaluate_script_cache_grid_grows_past_an_edge_choice(tmp_path, capsys):
    """With --grid_extensions (default 6) the grid asked for is scored, then grows past the edge the choice sits on;
    the JSON says per axis where the choice lies, and the progress bar counts every point scored."""
    main = evaluate_script()
    _, tok, files = evaluation_files(tmp_path, 20)
    tiny_model(vocab_size=len(tok)).save_pretrained(tmp_path / "a")
    tok.save_pretrained(tmp_path / "a")
    res = main([str(tmp_path / "a"), *files, "--batch_size", "2", "--cache_grid", "--cache_grid_windows", "3", "7",
                "--cache_grid_thetas", "0.5", "--cache_grid_lambdas", "0.01", "0.02"])  # fmt: skip
    grid, place, best = res["cache_grid"], res["cache_grid_bracket"], res["cache_grid_best_on_validation"]
    asked = {(w, 0.5, lam) for w in (3, 7) for lam in (0.01, 0.02)}
    assert asked < {(r["window"], r["theta"], r["lam"]) for r in grid}  # at λ <= 0.02 the cache is worth more
    assert place["theta"] == "fixed" and {r["theta"] for r in grid} == {0.5}
    for axis in ("window", "lam"):
        values = sorted({r[axis] for r in grid})
        inside = values[0] < best[axis] < values[-1]
        assert (place[axis] == "inside") == inside and place[axis] in ("inside", "at its bound", "at the edge")
    assert 0.04 in {r["lam"] for r in grid}  # the step continued: 0.02**2 / 0.01
    assert f"{len(grid)}/{len(grid)}" in capsys.readouterr().err


def parabola(**axes):
    """Rows of a bowl with its minimum at x = 50 (in log x), y = 0.7."""
    points = [dict(zip(axes, v, strict=True)) for v in itertools.product(*axes.values())]
    return [dict(p, ppl=math.log(p["x"] / 50) ** 2 + (p["y"] - 0.7) ** 2) for p in points]


def test_bracketed_grid_grows_each_axis_until_the_choice_is_inside():
    calls = []

    def search(**axes):
        calls.append({k: list(v) for k, v in axes.items()})
        return parabola(**axes)

    rows, place = bracketed_grid(search, {"x": [2, 1, 4], "y": [0.2, 0.4]}, {"y": (0.0, 1.0, float)}, extensions=10)
    assert place == {"x": "inside", "y": "inside"}
    assert (rows[0]["x"], rows[0]["y"]) == (64, pytest.approx(0.8)) and rows == sorted(rows, key=lambda r: r["ppl"])
    # x grows 4 -> 8 -> 16 -> 32 -> 64 -> 128 (each scored against every y so far), y 0.4 -> 0.8 -> 1.0 (clipped)
    assert sorted({r["x"] for r in rows}) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert sorted({r["y"] for r in rows}) == pytest.approx([0.2, 0.4, 0.8, 1.0])
    assert calls[0] == {"x": [1, 2, 4], "y": [0.2, 0.4]}
    seen = {k: set(v) for k, v in calls[0].items()}
    for c in calls[1:]:  # one new value of one axis, scored against every value of the others so far
        (new,) = [k for k, v in c.items() if not set(v) <= seen[k]]
        assert len(c[new]) == 1 and all(set(c[k]) == seen[k] for k in c if k != new)
        seen[new] |= set(c[new])
    assert len(rows) == len({(r["x"], r["y"]) for r in rows}) == sum(len(parabola(**c)) for c in calls)


@pytest.mark.parametrize(
    "axes, bounds, extensions, want",
    [
        ({"x": [50, 60], "y": [0.8, 0.9]}, {"y": (0.0, 0.9, float)}, 6, {"x": "inside", "y": "inside"}),
        ({"x": [40, 60], "y": [0.2, 0.4]}, {"y": (0.0, 0.5, float)}, 6, {"x": "inside", "y": "at its bound"}),
        ({"x": [1, 2], "y": [0.7]}, {}, 2, {"x": "at the edge", "y": "fixed"}),
        ({"x": [2, 1, 2], "y": [0.7, 0.7]}, {}, 2, {"x": "at the edge", "y": "fixed"}),  # repeated values count once
        ({"x": [5, 20], "y": [0.7]}, {"x": (5, 1000, int)}, 6, {"x": "inside", "y": "fixed"}),
        ({"x": [200, 800], "y": [0.7]}, {"x": (1, 800, int)}, 6, {"x": "inside", "y": "fixed"}),
        ({"x": [200, 800], "y": [0.7]}, {"x": (200, 800, int)}, 6, {"x": "at its bound", "y": "fixed"}),
    ],
)
def test_bracketed_grid_says_where_the_choice_lies(axes, bounds, extensions, want):
    """A low edge grows downward (x = 50: 41.7 is scored and is worse; y: 0.711 better, then 0.632 worse); `at the
    edge`: the extensions ran out (x from 2 upward); `at its bound`: a bound stops the growth; integer axes step by
    rounded values (5, 20 -> 80; 800, 200 -> 50 -> 13 -> ...)."""
    rows, place = bracketed_grid(parabola, axes, bounds, extensions)
    assert place == want, rows[:3]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--cache_grid", "--cache_grid_windows", "0", "5"], "--cache_grid_windows must be >= 1, got 0"),
        (["--cache_grid", "--cache_grid_lambdas", "0.1", "1.5"], "--cache_grid_lambdas must be in [0, 1], got 1.5"),
        (["--cache_grid", "--cache_grid_thetas", "1", "nan"], "--cache_grid_thetas must be a finite number, got nan"),
        (["--cache", "--cache_window", "0"], "--cache_window must be >= 1, got 0"),
        (["--cache", "--cache_lambda", "-0.1"], "--cache_lambda must be in [0, 1], got -0.1"),
        (["--cache_grid_windows", "5"], "--cache_grid_windows needs --cache_grid"),  # else silently unused
    ],
)
def test_evaluate_script_refuses_bad_cache_settings_before_evaluating(tmp_path, capsys, flags, message):
    main = evaluate_script()
    with pytest.raises(SystemExit) as stop:  # before the (nonexistent) model is even looked at
        main([str(tmp_path / "no_model"), *flags])
    assert stop.value.code == 2 and f"error: {message}" in capsys.readouterr().err


def stream_outputs(targets, p_vocab, gate, pointer_p):
    """StreamOutputs of one stream from per-position p_vocab(y), g and the pointer's probability on y."""
    t = lambda v: torch.tensor([v], dtype=torch.float64)  # noqa: E731
    p_mix = t(gate) * t(p_vocab) + t(pointer_p)
    return StreamOutputs(torch.tensor([targets]), p_mix.log(), t(p_vocab).log(), t(gate))


def test_pointer_picture_positions_pick_rare_words_the_pointer_predicts():
    """Like the paper's figures: a rare target (not <eos>/<unk>) that the pointer supplies and the model gets right.
    Word 0 is <eos>, 1 <unk>, 2-3 frequent in training, 5-9 rare."""
    train = torch.tensor([0] * 50 + [1] * 30 + [2] * 40 + [3] * 40 + [5, 6, 7, 8, 9])
    cases = [  # (target, p_vocab, g, pointer's probability on the target)
        (5, 0.9, 0.1, 0.9),  # 0: before min_position
        (2, 0.1, 0.1, 0.95),  # 1: frequent word
        (0, 0.1, 0.1, 0.9),  # 2: <eos>
        (1, 0.1, 0.1, 0.9),  # 3: <unk>
        (6, 0.01, 0.0, 0.2),  # 4: rare, all from the pointer, but poorly predicted
        (7, 0.9, 0.9, 0.05),  # 5: rare, predicted well by the vocabulary softmax
        (8, 0.01, 0.1, 0.7),  # 6: rare, the pointer's, well predicted: the best
        (9, 0.01, 0.05, 0.6),  # 7: rare, the pointer's, well predicted
        (8, 0.01, 0.05, 0.8),  # 8: the same word as position 6 (one picture per word)
        (2, 0.1, 0.1, 0.9),  # 9: frequent word
        (3, 0.9, 0.9, 0.0),  # 10: frequent word, predicted by the vocabulary
    ]
    outs = stream_outputs(*map(list, zip(*cases, strict=True)))
    pick = pointer_picture_positions(outs, train, exclude_ids=(0, 1), n=3, min_position=1)
    assert pick == [8, 7, 4]  # well predicted first, then the rest the pointer supplies; position 6 repeats word 8
    assert pointer_picture_positions(outs, train, exclude_ids=(0, 1), n=6, min_position=1)[3:] == [1, 5, 10]


def test_pointer_picture_html_escapes_words(tmp_path):
    tok = build_word_level_tokenizer(["a b c a b c d", "e f a"])
    model = tiny_model(vocab_size=len(tok)).eval()
    ids = torch.tensor(tok("a zzz b a zzz b")["input_ids"])  # zzz is unknown: <unk>
    pointer_window_picture(model, tok, ids, 4, tmp_path / "w.png", tmp_path / "w.html")
    page = (tmp_path / "w.html").read_text()
    assert "&lt;unk&gt;" in page and "<unk>" not in page


def test_plots_without_matplotlib_fail_before_evaluating(monkeypatch, tmp_path, capsys):
    import sys

    main = evaluate_script()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(SystemExit) as stop:  # before the (nonexistent) model is even looked at
        main([str(tmp_path / "no_model"), "--plots", str(tmp_path / "plots")])
    assert stop.value.code == 2 and "error: --plots needs matplotlib" in capsys.readouterr().err


def test_a_cache_grid_point_with_an_impossible_target_ranks_last():
    """A target the model gives probability 0: with lambda 0 the perplexity is inf (ranked last, not an error), and
    the cache, which has seen the word, rescues it at lambda 0.5."""
    from modeling_pointer_sentinel.evaluation import StreamOutputs, cache_grid_search

    targets = torch.tensor([[1, 2, 1, 2, 1, 2]])
    lp = torch.full((1, 6), math.log(0.5), dtype=torch.float64)
    lp[0, 4] = -math.inf
    out = StreamOutputs(targets, lp, lp, torch.ones(1, 6), hidden=torch.randn(1, 6, 4, dtype=torch.float64))
    grid = cache_grid_search(out, windows=[3], thetas=[1.0], lambdas=[0.0, 0.5])
    assert [r["lam"] for r in grid] == [0.5, 0.0] and math.isfinite(grid[0]["ppl"]) and grid[1]["ppl"] == math.inf


def test_unknown_penalised_perplexity_divides_unk_by_the_oov_types():
    """UPP by its definition, target by target: p(<unk>) / K for each <unk> target, p(y) for the others; K defaults to
    the number of <unk> targets (each a word of its own: the largest K, so an upper bound)."""
    targets = torch.tensor([[5, 1, 7, 1, 1, 2]])
    log_probs = torch.log(torch.tensor([[0.2, 0.3, 0.05, 0.25, 0.4, 0.1]], dtype=torch.float64))
    out = StreamOutputs(targets, log_probs, log_probs, torch.ones_like(log_probs))
    p = [0.2, 0.3 / 2, 0.05, 0.25 / 2, 0.4 / 2, 0.1]
    upp = unknown_penalised_perplexity(out, unk_id=1, oov_types=2)
    assert upp["ppl"] == pytest.approx(math.exp(-sum(map(math.log, p)) / 6), rel=1e-12)
    assert (upp["oov_types"], upp["unk_targets"], upp["bound"]) == (2, 3, False)
    bound = unknown_penalised_perplexity(out, unk_id=1)
    assert (bound["oov_types"], bound["bound"]) == (3, True) and bound["ppl"] > upp["ppl"]
    assert unknown_penalised_perplexity(out, unk_id=9)["ppl"] == pytest.approx(out.perplexity(), rel=1e-12)
    with pytest.raises(ValueError, match="oov_types must be >= 1"):
        unknown_penalised_perplexity(out, unk_id=1, oov_types=0)


def test_evaluate_reports_the_unknown_penalised_perplexity(tmp_path):
    _, tok, files = evaluation_files(tmp_path, 3)
    (tmp_path / "test.txt").write_text("a b <unk> c <unk> d\nf <unk> a b\n")
    model = tiny_model(vocab_size=len(tok), eos_token_id=tok.eos_token_id).eval()
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    results = evaluate_script()([str(tmp_path / "m"), *files, "--batch_size", "1", "--oov_types", "2"])
    assert results["upp"]["oov_types"] == 2 and results["upp"]["unk_targets"] == 3
    assert results["upp"]["ppl"] > results["ppl"]
