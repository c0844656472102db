"""Dynamic evaluation (Krause et al., 2018): the update rule by hand, the gradient statistics, honest scoring order,
the caller's model untouched, and agreement with a per-segment reference loop for each model kind."""

import copy
import dataclasses
import json
import math
import types

import pytest
import torch
from conftest import evaluate_script, evaluation_files, tiny_model

from modeling_pointer_sentinel import PointerSentinelCache
from modeling_pointer_sentinel.evaluation import (
    DynamicUpdate,
    GradientStatistics,
    NeuralCache,
    collect_outputs,
    dynamic_evaluate,
    dynamic_grid_search,
    gradient_statistics,
)
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

# (model overrides, objective, the static field it scores): the pointer model, the pointer-off ablation, the plain LM
# The auxiliary pointer loss is on: an objective that kept it would show.
AUX = {"pointer_loss_weight": 0.5}
KINDS = [
    (AUX, "mixture", "log_probs"),
    (AUX, "vocab", "vocab_log_probs"),
    ({"use_pointer": False}, "mixture", "log_probs"),
]
KIND_IDS = ["pointer", "pointer-off", "plain"]


def counter():
    progress = types.SimpleNamespace(n=0)
    progress.update = lambda k: setattr(progress, "n", progress.n + k)
    return progress


def train_ids(n=400, seed=1):
    return torch.randint(0, 23, (n,), generator=torch.Generator().manual_seed(seed))


def log_p(model, x, cache, y, objective):
    """Independent of the package's loss path: log-softmax of the full logits (the mixture's are log-probabilities
    already) or of the vocabulary logits, at the targets."""
    out = model(x, past_key_values=cache, use_cache=True)
    logits = out.logits if objective == "mixture" else out.vocab_logits
    return torch.log_softmax(logits, -1).gather(-1, y[..., None])[..., 0]


def reference_dynamic(model, ids, stats, lr, lam, segment, eps):
    """Krause et al.'s loop written out: score a segment, then θ += min(λ·rms/mean, 1)(θ0 - θ) - η g / (rms + ε)."""
    m = copy.deepcopy(model).eval()
    params = dict(m.named_parameters())
    theta0 = {n: params[n].detach().clone() for n in stats.rms}
    mean = sum(r.mean() for r in stats.rms.values()) / len(stats.rms)
    cache, scores = PointerSentinelCache(), []
    for p in range(0, ids.numel() - 1, segment):
        x, y = ids[None, p : p + segment], ids[None, p + 1 : p + segment + 1]
        x = x[:, : y.shape[1]]
        lp = log_p(m, x, cache, y, stats.objective)
        scores.append(lp.detach())
        m.zero_grad()
        (-lp.mean()).backward()
        with torch.no_grad():
            for n, rms in stats.rms.items():
                w, g = params[n], params[n].grad
                decay = torch.clamp(lam * rms / mean, max=1)
                w += decay * (theta0[n] - w) - lr * (0 if g is None else g) / (rms + eps)
        cache.detach_()
    return torch.cat(scores, 1)


# --- the update rule ----------------------------------------------------------------------------------------------


class TwoParameters(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))  # θ0
        self.b = torch.nn.Parameter(torch.tensor([0.5]))


@pytest.mark.parametrize(
    "lam,want_w,want_b",
    [
        # decrate = rms / mean of the tensors' mean rms = [0.1, 0.3] / 0.4 = [0.25, 0.75] and [0.6] / 0.4 = [1.5]
        # w: 2 + 0.25 (1 - 2) - 0.01 * 0.4 / 0.2 = 1.73; -1 + 0.75 (-2 + 1) + 0.01 * 0.2 / 0.4 = -1.745
        # b: decay min(1.5, 1) = 1: 1.5 + (0.5 - 1.5) - 0.01 * 0.7 / 0.7 = 0.49
        (1.0, [1.73, -1.745], [0.49]),
        # lambda 0.5: decay [0.125, 0.375] and 0.75 (not clipped)
        (0.5, [2 - 0.125 - 0.02, -1 - 0.375 + 0.005], [1.5 - 0.75 - 0.01]),
    ],
)
def test_update_rule_matches_a_hand_computed_step(lam, want_w, want_b):
    m = TwoParameters()
    stats = GradientStatistics({"w": torch.tensor([0.1, 0.3]), "b": torch.tensor([0.6])}, "mixture", 0)
    update = DynamicUpdate(m, stats, lr=0.01, lam=lam, epsilon=0.1)
    with torch.no_grad():  # the weights have moved away from θ0
        m.w.copy_(torch.tensor([2.0, -1.0]))
        m.b.copy_(torch.tensor([1.5]))
    m.w.grad, m.b.grad = torch.tensor([0.4, -0.2]), torch.tensor([0.7])
    update()
    torch.testing.assert_close(m.w.detach(), torch.tensor(want_w))
    torch.testing.assert_close(m.b.detach(), torch.tensor(want_b))


def test_decay_pulls_the_weights_back_to_the_trained_ones():
    model = tiny_model().eval()
    stats = gradient_statistics(model, train_ids(), batch_size=4, segment_length=5)
    m = copy.deepcopy(model)
    update = DynamicUpdate(m, stats, lr=1e-2, lam=0.05)
    ids = train_ids(30, seed=2)
    m(ids[None, :-1], shift_labels=ids[None, 1:]).loss.backward()
    update()  # a gradient step away from θ0
    theta0 = dict(model.named_parameters())
    moved = {n: (p - theta0[n]).detach().clone() for n, p in m.named_parameters()}
    assert max(d.abs().max().item() for d in moved.values()) > 1e-3
    m.zero_grad(set_to_none=True)  # then steps with no gradient: the decay alone, geometric towards θ0
    for _ in range(40):
        update()
    rates = stats.decay_rates()
    for n, p in m.named_parameters():
        want = (1 - (0.05 * rates[n]).clamp(max=1)) ** 40 * moved[n]
        torch.testing.assert_close((p - theta0[n]).detach(), want, atol=1e-6, rtol=1e-4)


def test_gradient_statistics_are_the_rms_of_segment_gradients():
    model = tiny_model().eval()
    ids = train_ids(58)
    progress = counter()
    stats = gradient_statistics(model, ids, tokens=52, batch_size=2, segment_length=4, progress=progress)
    streams = ids[:54].view(2, 27)  # 52 targets as 2 streams of 26, in segments of 4 (the last of 2)
    assert stats.tokens == progress.n == 52
    m = copy.deepcopy(model)
    squares, cache, segments = {n: 0 for n, _ in m.named_parameters()}, PointerSentinelCache(), 0
    for p in range(0, 26, 4):
        y = streams[:, p + 1 : p + 5]
        m.zero_grad()
        (-log_p(m, streams[:, p : p + y.shape[1]], cache, y, "mixture").mean()).backward()
        cache.detach_()
        segments += 1
        for n, w in m.named_parameters():
            squares[n] = squares[n] + w.grad**2
    assert segments == 7 and set(stats.rms) == set(squares)
    for n, s in squares.items():
        torch.testing.assert_close(stats.rms[n], (s / segments).sqrt(), rtol=1e-4, atol=1e-7)
    mean = torch.stack([r.mean() for r in stats.rms.values()]).mean()
    assert all(torch.equal(r, stats.rms[n] / mean) for n, r in stats.decay_rates().items())
    # a tensor the training text never moves (the copy head on closed text) leaves the others' rates as they were
    unused = GradientStatistics({**stats.rms, "pointer.oov_query.weight": torch.zeros(3, 3)}, "mixture", 52)
    rates = unused.decay_rates()
    assert all(torch.equal(rates[n], r) for n, r in stats.decay_rates().items())
    assert not rates["pointer.oov_query.weight"].any()
    vocab = gradient_statistics(model, ids, tokens=52, batch_size=2, segment_length=4, objective="vocab")
    assert set(vocab.rms) == {n for n in stats.rms if not n.startswith("pointer.")}  # the pointer is switched off


# --- dynamic evaluation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides,objective,field", KINDS, ids=KIND_IDS)
def test_zero_learning_rate_and_decay_is_static_evaluation(overrides, objective, field):
    model = tiny_model(**overrides).eval()
    stats = gradient_statistics(model, train_ids(), batch_size=4, segment_length=5, objective=objective)
    ids = train_ids(47, seed=3)
    progress = counter()
    out = dynamic_evaluate(model, ids, stats, lr=0.0, lam=0.0, segment_length=7, keep_hidden=True, progress=progress)
    static = collect_outputs(model, ids[None], bptt=7, keep_hidden=True)  # batch 1, the same segments
    assert progress.n == 46 and torch.equal(out.targets, static.targets)
    # equal to float rounding: autograd's forward may round a rare value differently from no_grad's
    torch.testing.assert_close(out.log_probs, getattr(static, field))
    torch.testing.assert_close(out.hidden, static.hidden)
    if objective == "mixture":
        torch.testing.assert_close(out.gate, static.gate)


@pytest.mark.parametrize("overrides,objective,field", KINDS, ids=KIND_IDS)
def test_dynamic_evaluation_equals_the_reference_loop(overrides, objective, field):
    model = tiny_model(**overrides).eval()
    stats = gradient_statistics(model, train_ids(), batch_size=4, segment_length=5, objective=objective)
    ids = torch.tensor([3, 7, 11, 5, 3, 7] * 7)  # a repeating stream: adapting to it helps
    out = dynamic_evaluate(model, ids, stats, lr=3e-3, lam=0.3, segment_length=6, epsilon=1e-3)
    want = reference_dynamic(model, ids, stats, 3e-3, 0.3, 6, 1e-3)
    torch.testing.assert_close(out.log_probs, want, atol=2e-5, rtol=1e-5)
    static = getattr(collect_outputs(model, ids[None], bptt=6), field)
    assert (out.log_probs - static)[:, 6:].abs().max() > 1e-2  # the updates matter: the comparison has teeth
    assert out.perplexity() < math.exp(-static.double().mean().item())  # and on this stream they help


def test_scoring_is_honest_each_segment_is_scored_before_it_is_learnt():
    """A target's score may depend only on the tokens up to it. Updating on a segment before scoring it would make
    the scores of a segment's early targets depend on its later ones (peeking, which lowers the loss)."""
    model = tiny_model().eval()
    stats = gradient_statistics(model, train_ids(), batch_size=4, segment_length=5)
    ids = train_ids(41, seed=5)
    changed = ids.clone()
    changed[16] = (ids[16] + 1) % 23  # the target of position 15, inside the segment of targets 10..19
    a, b = (dynamic_evaluate(model, s, stats, lr=0.05, lam=0.01, segment_length=10).log_probs for s in (ids, changed))
    torch.testing.assert_close(a[:, :15], b[:, :15], rtol=0, atol=0)
    assert (a[:, 20:] - b[:, 20:]).abs().max() > 1e-3  # later segments learnt from it


@pytest.mark.parametrize("overrides,objective,field", KINDS, ids=KIND_IDS)
def test_the_callers_model_is_unchanged(overrides, objective, field):
    model = tiny_model(**overrides).eval()
    before = {n: t.clone() for n, t in model.state_dict().items()}
    stats = gradient_statistics(model, train_ids(), batch_size=4, segment_length=5, objective=objective)
    dynamic_evaluate(model, train_ids(30, seed=6), stats, lr=0.1, lam=0.01, segment_length=4)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[n], after[n]) for n in before)
    assert all(p.grad is None for p in model.parameters()) and not model.training
    assert model.pointer is not None or not model.config.use_pointer
    assert model.config.pointer_loss_weight == tiny_model(**overrides).config.pointer_loss_weight


def test_unk_and_one_token_segments_give_finite_results():
    tok = build_word_level_tokenizer(["a b c a b c d", "e f a"])
    model = tiny_model(vocab_size=len(tok)).eval()
    ids = torch.tensor(tok("a zzz b a zzz b qq c")["input_ids"])  # zzz, qq: <unk>
    assert (ids == tok.convert_tokens_to_ids("<unk>")).sum() == 3
    stats = gradient_statistics(model, torch.tensor(tok("a b c d e f a b c")["input_ids"]), batch_size=1)
    for segment in (1, 3, 100):  # one-token segments, a short last segment, one segment longer than the stream
        out = dynamic_evaluate(model, ids, stats, lr=1e-2, lam=0.02, segment_length=segment)
        assert out.log_probs.shape == (1, ids.numel() - 1) and torch.isfinite(out.log_probs).all()
    two = dynamic_evaluate(model, ids[:2], stats, lr=1e-2, lam=0.02, segment_length=5)  # a single target
    assert two.log_probs.shape == (1, 1) and math.isfinite(two.perplexity())


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(lr=-1e-3), "lr >= 0"),
        (dict(lr=float("nan")), "lr >= 0"),
        (dict(lam=-0.1), "lambda >= 0"),
        (dict(epsilon=0.0), "epsilon > 0"),
        (dict(segment_length=0), "segment_length must be >= 1"),
        (dict(ids=torch.zeros(2, 5, dtype=torch.long)), "one flat stream"),
        (dict(ids=torch.zeros(1, dtype=torch.long)), "at least 2 ids"),
        (dict(vocab_stats=True), "collected for other parameters"),
    ],
)
def test_bad_input_raises_one_clear_error(kwargs, message):
    model = tiny_model().eval()
    objective = "vocab" if kwargs.pop("vocab_stats", False) else "mixture"
    stats = gradient_statistics(model, train_ids(), batch_size=4, segment_length=5, objective=objective)
    call = dict(ids=train_ids(20), lr=1e-3, lam=0.01)
    call.update(kwargs)
    if objective == "vocab":  # statistics of the pointer-off copy, offered to the pointer model's
        stats = GradientStatistics(stats.rms, "mixture", stats.tokens)
    with pytest.raises(ValueError, match=message):
        dynamic_evaluate(model, stats=stats, **call)
    with pytest.raises(ValueError, match="objective must be one of"):
        gradient_statistics(model, train_ids(), objective="pointer")
    with pytest.raises(ValueError, match="segment_length >= 1"):
        gradient_statistics(model, train_ids(), segment_length=0)


@pytest.mark.parametrize("overrides,objective,field", KINDS, ids=KIND_IDS)
def test_combines_with_the_neural_cache(overrides, objective, field):
    model = tiny_model(**overrides).eval()
    stats = gradient_statistics(model, train_ids(), batch_size=4, segment_length=5, objective=objective)
    ids = train_ids(60, seed=7)
    static = collect_outputs(model, ids[None], bptt=5, keep_hidden=True)
    still = dynamic_evaluate(model, ids, stats, lr=0.0, lam=0.0, segment_length=5, keep_hidden=True)
    moving = dynamic_evaluate(model, ids, stats, lr=1e-2, lam=0.02, segment_length=5, keep_hidden=True)
    cached = [NeuralCache(20, 0.5, 0.3)(o.hidden, o.targets, lp) for o, lp in
              ((static, getattr(static, field)), (still, still.log_probs), (moving, moving.log_probs))]  # fmt: skip
    torch.testing.assert_close(cached[1], cached[0])  # lr 0: the cache on the static model's states
    assert torch.isfinite(cached[2]).all() and (cached[2] - cached[0]).abs().max() > 1e-3  # the adapted states


def test_grid_search_rows_and_progress():
    model = tiny_model().eval()
    stats = gradient_statistics(model, train_ids(), batch_size=4, segment_length=5)
    ids = train_ids(30, seed=8)
    points = [dict(lr=lr, lam=0.01, segment_length=s) for lr in (0.0, 1e-2) for s in (3, 5)]
    progress = counter()
    rows = dynamic_grid_search(model, ids, stats, points, progress=progress)
    assert progress.n == 4 and [r["ppl"] for r in rows] == sorted(r["ppl"] for r in rows)
    for r in rows:
        want = dynamic_evaluate(model, ids, stats, r["lr"], r["lam"], r["segment_length"]).perplexity()
        assert r["ppl"] == pytest.approx(want, rel=1e-9) and r["seconds"] >= 0


# --- examples/evaluate.py --dynamic -------------------------------------------------------------------------------


def test_evaluate_script_dynamic(tmp_path, capsys):
    main = evaluate_script()
    _, tok, files = evaluation_files(tmp_path, 10)
    tiny_model(vocab_size=len(tok)).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    res = main([str(tmp_path / "m"), *files, "--batch_size", "1", "--bptt", "5", "--cache", "--dynamic",
                "--dynamic_grid", "--dynamic_grid_lrs", "0", "1e-3", "--dynamic_grid_lambdas", "0", "0.01",
                "--dynamic_grid_segments", "5", "--dynamic_stats_batch_size", "2", "--dynamic_pointer_off",
                "--output_json", str(tmp_path / "r.json")])  # fmt: skip
    dyn, best = res["dynamic"], res["dynamic_grid_best_on_validation"]
    assert (dyn["lr"], dyn["lam"], dyn["segment_length"]) == (best["lr"], best["lam"], best["segment_length"])
    assert best["ppl"] == min(r["ppl"] for r in res["dynamic_grid"])
    # the 4 points asked for, and any grown past an edge choice (--grid_extensions 6); lr and lambda per 5 targets
    grid, place = res["dynamic_grid"], res["dynamic_grid_bracket"]
    assert {(x, y, 5) for x in (0, 1e-3) for y in (0, 0.01)} <= {(r["lr"], r["lam"], r["segment_length"]) for r in grid}
    assert place["segment_length"] == "fixed" and all(r["grid_lr"] == r["lr"] for r in grid)
    assert "at the edge" not in place.values() and len(grid) > 4  # here the choice needed growth, and got it
    for axis in ("grid_lr", "grid_lam"):
        values = sorted({r[axis] for r in grid})
        assert (place[axis] == "inside") == (values[0] < best[axis] < values[-1])
    # the grid is searched on validation: a run scoring the validation split finds the same grid, and there (the
    # batch-1 static evaluation uses the same 5-token segments) the chosen point's figure and the static one return
    flags = [
        "--batch_size",
        "1",
        "--bptt",
        "5",
        "--dynamic",
        "--dynamic_grid",
        "--dynamic_grid_lrs",
        "0",
        "1e-3",
        "--dynamic_grid_lambdas",
        "0",
        "0.01",
        "--dynamic_grid_segments",
        "5",
        "--dynamic_stats_batch_size",
        "2",
    ]
    on_valid = main([str(tmp_path / "m"), *files, *flags, "--split", "validation"])
    assert [{**r, "seconds": 0} for r in on_valid["dynamic_grid"]] == [{**r, "seconds": 0} for r in res["dynamic_grid"]]
    assert on_valid["ppl_dynamic"] == pytest.approx(best["ppl"], rel=1e-9)
    assert res["ppl_dynamic"] != pytest.approx(best["ppl"], rel=1e-3)  # the test split is another text
    static = next(r["ppl"] for r in res["dynamic_grid"] if r["lr"] == 0 and r["lam"] == 0)
    assert static == pytest.approx(on_valid["ppl"], rel=1e-5)
    assert dyn["stats_tokens"] > 0 and dyn["objective"] == "mixture" and dyn["seconds"] >= 0
    assert res["dynamic_pointer_off"]["objective"] == "vocab" and math.isfinite(res["ppl_dynamic_pointer_off"])
    assert math.isfinite(res["ppl_dynamic_with_cache"])
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(res))
    out, err = capsys.readouterr()
    assert f"{res['ppl_dynamic']:.2f}" in out and "dynamic evaluation" in out
    n = len(grid)
    assert "dynamic grid (validation)" in err and f"{n}/{n}" in err and "gradient statistics" in err
    with pytest.raises(SystemExit) as stop:  # the statistics need the training split
        main([str(tmp_path / "m"), "--test_file", str(tmp_path / "test.txt"), "--dynamic"])
    assert stop.value.code == 2 and "error: --dynamic" in capsys.readouterr().err


def test_the_cache_on_dynamic_evaluation_is_chosen_on_the_adapting_models_validation_outputs(tmp_path, capsys):
    """With --cache_grid, the cache on top of dynamic evaluation is chosen again for the model it sits on: by the
    bracketed grid on the adapting model's outputs over the validation split, then applied to the split scored."""
    from modeling_pointer_sentinel.training import encode_lines, shard_streams

    main = evaluate_script()
    lines, tok, files = evaluation_files(tmp_path, 10)
    model, streams = tiny_model(vocab_size=len(tok)), shard_streams(encode_lines(tok, lines), 4)
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    for t in [10 * s % (streams.shape[1] - 11) for s in range(20)]:  # a random model's states give the cache nothing
        optimizer.zero_grad()
        model(input_ids=streams[:, t : t + 10], labels=streams[:, t : t + 10]).loss.backward()
        optimizer.step()
    model.eval().save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    flags = ["--batch_size", "1", "--bptt", "5", "--cache_grid", "--cache_grid_windows", "5", "20",
             "--cache_grid_thetas", "0.3", "1.0", "--cache_grid_lambdas", "0.05", "0.3", "--dynamic",
             "--dynamic_lr", "1e-3", "--dynamic_lambda", "0.02", "--dynamic_segment", "5",
             "--dynamic_stats_batch_size", "2"]  # fmt: skip
    res = main([str(tmp_path / "m"), *files, *flags])
    chosen, best = res["dynamic_cache"], res["dynamic_cache_grid_best_on_validation"]
    assert chosen == {k: best[k] for k in ("window", "theta", "lam")}
    assert set(res["dynamic_cache_grid_bracket"]) == {"window", "theta", "lam"}
    # the same grid recomputed from the package's parts: the adapting model's validation outputs with each cache
    ids = {s: encode_lines(tok, (tmp_path / f"{s}.txt").read_text().splitlines()) for s in ("train", "valid", "test")}
    stats = gradient_statistics(model, ids["train"], 100_000, batch_size=2, segment_length=5)
    adapted = {s: dynamic_evaluate(model, ids[s], stats, 1e-3, 0.02, 5, keep_hidden=True) for s in ("valid", "test")}
    for row in res["dynamic_cache_grid"]:
        cached = NeuralCache(row["window"], row["theta"], row["lam"])(
            adapted["valid"].hidden, adapted["valid"].targets, adapted["valid"].log_probs
        )
        assert row["ppl"] == pytest.approx(math.exp(-cached.double().mean().item()), rel=1e-9)
    assert best["ppl"] == min(r["ppl"] for r in res["dynamic_cache_grid"])
    # on the adapting model the grid ranks otherwise than on the static one; here it chooses another cache
    assert chosen != {k: res["cache"][k] for k in ("window", "theta", "lam")}
    cached = NeuralCache(**chosen)(adapted["test"].hidden, adapted["test"].targets, adapted["test"].log_probs)
    assert res["ppl_dynamic_with_cache"] == pytest.approx(math.exp(-cached.double().mean().item()), rel=1e-9)
    capsys.readouterr()
    on_valid = main([str(tmp_path / "m"), *files, *flags, "--split", "validation"])  # scores its own choice
    assert on_valid["dynamic_cache_grid"] == res["dynamic_cache_grid"]
    assert on_valid["ppl_dynamic_with_cache"] == pytest.approx(best["ppl"], rel=1e-9)
    assert "dynamic evaluation + neural cache, chosen on validation" in capsys.readouterr().out


def test_a_stopped_grid_resumes_from_its_memo(tmp_path, capsys):
    main = evaluate_script()
    _, tok, files = evaluation_files(tmp_path, 10)
    tiny_model(vocab_size=len(tok)).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    memo = tmp_path / "grid.jsonl"
    flags = [*files, "--batch_size", "1", "--bptt", "5", "--dynamic", "--dynamic_grid", "--dynamic_grid_lrs", "0",
             "1e-3", "--dynamic_grid_lambdas", "0", "0.01", "--dynamic_grid_segments", "5",
             "--dynamic_stats_batch_size", "2", "--grid_extensions", "2", "--dynamic_grid_tokens", "60",
             "--dynamic_grid_memo", str(memo)]  # fmt: skip

    def grid(res):
        return [{**r, "seconds": 0} for r in res["dynamic_grid"]]

    whole = main([str(tmp_path / "m"), *flags])
    rows = [json.loads(line) for line in memo.read_text().splitlines()]
    assert len(rows) == len(whole["dynamic_grid"]) > 4  # every point, each kept once, the grown ones too
    assert len({r["context"] for r in rows}) == 1
    # a stop: the first points kept, the last one cut short by the kill; the worst kept point made a little worse, so
    # the search takes the same path and a point read from the memo shows
    kept = sorted(rows[:3], key=lambda r: r["ppl"])
    kept[-1]["ppl"] *= 1 + 1e-6
    cut = json.dumps(rows[3])[:20]
    memo.write_text("".join(json.dumps(r) + "\n" for r in kept) + cut)
    capsys.readouterr()
    resumed = main([str(tmp_path / "m"), *flags])
    assert "3 points of this grid scored before are kept" in capsys.readouterr().err
    marked = {**{k: v for k, v in kept[-1].items() if k != "context"}, "seconds": 0}
    assert marked in grid(resumed) and marked not in grid(whole)
    assert [r for r in grid(resumed) if r != marked] == [r for r in grid(whole) if r["lr"] != marked["lr"]
                                                         or r["lam"] != marked["lam"]]  # fmt: skip
    assert resumed["ppl_dynamic"] == whole["ppl_dynamic"]
    lines = memo.read_text().splitlines()  # the cut line left alone on its own line, the missing points added
    again = [json.loads(line) for line in lines if line != cut]
    assert len(again) == len(lines) - 1
    assert sorted((r["lr"], r["lam"]) for r in again) == sorted((r["lr"], r["lam"]) for r in resumed["dynamic_grid"])


def test_the_grid_memo_digest_changes_with_each_thing_a_score_depends_on_and_keys_the_points(tmp_path):
    evaluate_script()
    from evaluate import GridMemo

    model = tiny_model()
    stats = GradientStatistics({n: torch.rand_like(p) for n, p in model.named_parameters()}, "mixture", 100)
    source = dict(train_ids=train_ids(120), batch_size=20, segment_length=5)
    tokens = train_ids(50)

    def context(m=model, s=stats, src=source, t=tokens, eps=2e-5):
        return GridMemo(tmp_path / "memo.jsonl", m, s, src, t, eps).context

    nudged, window = copy.deepcopy(model), copy.deepcopy(model)
    with torch.no_grad():
        next(nudged.parameters()).view(-1)[0] += 1e-3
    window.config.pointer_window += 1
    fewer, vocab = dataclasses.replace(stats, tokens=99), dataclasses.replace(stats, objective="vocab")
    changed = [context(m=nudged), context(m=window), context(s=fewer), context(s=vocab), context(t=tokens[:-1]),
               context(eps=1e-5), context(src=source | dict(train_ids=source["train_ids"][1:])),
               context(src=source | dict(batch_size=10)), context(src=source | dict(segment_length=4))]  # fmt: skip
    assert context() == context(m=copy.deepcopy(model)) and context() not in changed
    assert len(set(changed)) == len(changed)
    # the same statistics computed on another machine differ in their last bits: the grid resumes there
    rounded = dataclasses.replace(stats, rms={n: r * (1 + 2**-20) for n, r in stats.rms.items()})
    assert context(s=rounded) == context()
    # a point kept under one model is read back for that model only
    point = dict(lr=1e-4, lam=1e-3, segment_length=5, grid_lr=1e-4, grid_lam=1e-3)
    memo = GridMemo(tmp_path / "memo.jsonl", model, stats, source, tokens, 2e-5)
    memo.search(lambda todo: [dict(todo[0], ppl=7.0)], [point], counter())
    assert GridMemo(tmp_path / "memo.jsonl", model, stats, source, tokens, 2e-5).rows == {
        (1e-4, 1e-3, 5): dict(point, ppl=7.0)
    }
    assert GridMemo(tmp_path / "memo.jsonl", nudged, stats, source, tokens, 2e-5).rows == {}


def test_a_diverging_grid_point_ranks_last_instead_of_breaking_the_search(capsys):
    """A learning rate far too large drives the adapted model to NaN: its row reads perplexity inf and sorts last (no
    OverflowError from exp, no NaN that leaves grid[0] other than the best); evaluate.py names it in one line, and
    stops with one error line when every point diverged."""
    from modeling_pointer_sentinel.evaluation import perplexity

    assert perplexity(float("nan")) == perplexity(1e4) == math.inf and perplexity(0.0) == 1.0
    model = tiny_model().eval()
    stats = gradient_statistics(model, train_ids(), batch_size=4, segment_length=5)
    points = [dict(lr=1e12, lam=0.0, segment_length=5), dict(lr=0.0, lam=0.0, segment_length=5)]
    grid = dynamic_grid_search(model, train_ids(60, seed=3), stats, points)
    assert [r["lr"] for r in grid] == [0.0, 1e12] and math.isfinite(grid[0]["ppl"]) and grid[1]["ppl"] == math.inf
    main = evaluate_script()
    best_of = main.__globals__["best_of"]
    assert best_of(grid, "dynamic grid") is grid[0]
    err = capsys.readouterr().err
    assert (
        err == "dynamic grid: 1 of 2 points diverged (perplexity inf, ranked last): [{'lr': 1000000000000.0, "
        "'lam': 0.0, 'segment_length': 5}]\n"
    )
    with pytest.raises(SystemExit) as stop:
        best_of(grid[1:], "dynamic grid")
    assert stop.value.code == 2 and "error: every point of the dynamic grid diverged" in capsys.readouterr().err
