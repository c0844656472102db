"""examples/evaluate.py on raw text (issue 54, part 5): with an open-vocabulary folder, a text's unseen words are read
as placeholders, numbered per stream as the tokenizer numbers a text's, so the score is the model's own `labels=`
loss over the streams; the summary gives the unseen-word rate and names the measure; UPP divides the new-word mass by
the text's distinct unseen words; text in corpus form scores as before.

Each reference here is computed apart from evaluate.py: the split cut into its contiguous streams by hand, each
stream's text encoded by the tokenizer (its own numbering of the stream's unseen words, the rest past its slots
read as <unk>) and scored by `model(ids, labels=ids)`."""

import math
import sys

import pytest
import torch
from conftest import evaluate_script, tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer

SLOTS = 4  # fewer than a stream's distinct unseen words, so some are read as <unk>
KNOWN = "the cat sat on a mat and dog ran to big red house".split()
UNSEEN = ["Zorbane", "Quexil", "Mirvale", "Dostrek", "Kelvash", "Tarrow", "Yullen"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny pointer model with SLOTS placeholders and its open-vocabulary tokenizer, saved together."""
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary

    d = tmp_path_factory.mktemp("open")
    lines = [" ".join(KNOWN[i:] + KNOWN[:i]) for i in range(len(KNOWN))] + ["<unk> the cat"]
    tok = open_vocabulary(build_word_level_tokenizer(lines), oov_slots=SLOTS)
    model = tiny_model(vocab_size=tok.word_vocab_size, oov_slots=SLOTS, unk_token_id=tok.unk_token_id,
                       eos_token_id=tok.eos_token_id, pointer_window=10)  # fmt: skip
    model.save_pretrained(d)
    tok.save_pretrained(d)
    (d.parent / "train.txt").write_text("\n".join(lines * 5) + "\n")
    return d


def raw_text(seed: int, literal_unk: bool, lines: int = 24) -> str:
    """Lines of known words with unseen words among them (some recurring within a few words, so the pointer can copy
    them), and with `literal_unk` some literal `<unk>`."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(lines):
        words = [KNOWN[i] for i in torch.randint(len(KNOWN), (int(torch.randint(4, 10, (1,), generator=g)),),
                                                 generator=g).tolist()]  # fmt: skip
        for _ in range(int(torch.randint(0, 3, (1,), generator=g))):
            at = int(torch.randint(len(words) + 1, (1,), generator=g))
            words.insert(at, UNSEEN[int(torch.randint(len(UNSEEN), (1,), generator=g))])
        if literal_unk and torch.rand(1, generator=g) < 0.3:
            words.insert(1, "<unk>")
        out.append(" ".join(words))
    return "\n".join(out) + "\n"


def streams_by_hand(folder, text: str, batch_size: int):
    """The split as `batch_size` contiguous streams of its words (`<eos>` after each line, the remainder dropped),
    each stream encoded on its own by the tokenizer, and the model's `labels=` output on each: (ids, outputs, words)
    per stream."""
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    words = [w for line in text.splitlines() for w in (*line.split(), "<eos>")]
    n = len(words) // batch_size
    rows = []
    for b in range(batch_size):
        row = words[b * n : (b + 1) * n]
        ids = torch.tensor([tok(" ".join("\n" if w == "<eos>" else w for w in row), add_special_tokens=False)
                            ["input_ids"]])  # fmt: skip
        assert ids.shape[1] == n
        with torch.no_grad():
            rows.append((ids[0], model(ids, labels=ids), row))
    return rows, model.config


def new_words(ids: torch.Tensor, vocab_size: int) -> list[bool]:
    """Per target: a placeholder its stream has not held before (the stream's first input counts as held)."""
    held, out = {int(ids[0])}, []
    for t in ids[1:].tolist():
        out.append(t >= vocab_size and t not in held)
        held.add(t)
    return out


def evaluate(folder, text_path, *flags):
    return evaluate_script()([str(folder), "--test_file", str(text_path), "--data_cache_dir",
                              str(folder.parent / "cache"), *flags])  # fmt: skip


@pytest.mark.parametrize("batch_size", [1, 2])
def test_raw_text_scores_unseen_words_as_placeholders_the_models_own_loss(folder, tmp_path, capsys, batch_size):
    """(a) The perplexity is exp of the mean `labels=` loss over the same streams, each encoded on its own: unseen
    words as placeholders (first occurrences, repeats, and the words past a stream's slots as <unk>), not as <unk>
    throughout. (b) The printed rates are the counted shares of the targets."""
    text = raw_text(0, literal_unk=True)
    (tmp_path / "raw.txt").write_text(text)
    rows, cfg = streams_by_hand(folder, text, batch_size)
    V, unk = cfg.vocab_size, cfg.unk_token_id
    targets = torch.stack([ids[1:] for ids, _, _ in rows])
    spelled = [w for _, _, row in rows for w in row[1:]]
    assert any(len(set(ids[ids >= V].tolist())) < int((ids >= V).sum()) for ids, _, _ in rows)  # repeats
    past = sum(w in UNSEEN and int(t) == unk for w, t in zip(spelled, targets.flatten(), strict=True))
    assert past > 0  # some stream has more distinct unseen words than slots

    res = evaluate(folder, tmp_path / "raw.txt", "--batch_size", str(batch_size))
    mean_loss = sum(out.loss.item() for _, out, _ in rows) / len(rows)  # streams of equal length
    assert res["tokens"] == targets.numel()
    assert res["ppl"] == pytest.approx(math.exp(mean_loss), rel=1e-5)
    closed = evaluate(folder, tmp_path / "raw.txt", "--batch_size", str(batch_size), "--unseen_as_unk")
    assert closed["ppl"] != pytest.approx(res["ppl"], rel=1e-3)  # placeholders, not <unk>, were scored

    n, u = targets.numel(), res["unseen_words"]
    placeholders, literal = int((targets >= V).sum()), spelled.count("<unk>")
    assert (u["placeholder_targets"], u["unk_targets"], u["unseen_past_slots"]) == (placeholders, literal, past)
    assert (u["placeholder_rate"], u["unk_rate"]) == (placeholders / n, literal / n)
    out = capsys.readouterr().out
    assert f"unseen words: {placeholders / n:.2%} of the targets read as placeholders ({placeholders:,};" in out
    assert f"literal <unk>: {literal / n:.2%} ({literal:,})" in out
    assert f"{past:,} past a stream's {SLOTS} slots, read as <unk>" in out
    assert f"measure: perplexity over all {n:,} targets; unseen words scored as placeholders" in out


def test_upp_divides_the_new_word_mass_by_the_texts_distinct_unseen_words(folder, tmp_path, capsys):
    """(c) UPP: each target the new-word mass scores (a stream's first occurrence of a placeholder, and <unk>)
    divided by K, the text's distinct unseen words; literal <unk> (no spelling) adds one type each, an upper bound;
    --oov_types still overrides."""
    for literal_unk in (False, True):
        text = raw_text(1, literal_unk)
        (tmp_path / "raw.txt").write_text(text)
        rows, cfg = streams_by_hand(folder, text, 2)
        spelled = [w for _, _, row in rows for w in row[1:]]
        literal = spelled.count("<unk>")
        assert (literal > 0) == literal_unk
        k = len({w for w in spelled if w in UNSEEN}) + literal
        penalised, log_p = [], []
        for ids, out, _ in rows:
            fresh = new_words(ids, cfg.vocab_size)
            penalised += [f or t == cfg.unk_token_id for f, t in zip(fresh, ids[1:].tolist(), strict=True)]
            log_p += out.target_log_probs[0, :-1].tolist()
        assert any(penalised) and not all(penalised)
        upp = math.exp(-sum(lp - p * math.log(k) for lp, p in zip(log_p, penalised, strict=True)) / len(log_p))

        res = evaluate(folder, tmp_path / "raw.txt", "--batch_size", "2")
        u = res["upp"]
        assert (u["oov_types"], u["bound"]) == (k, literal_unk)
        assert u["oov_types_from"].startswith("the text's distinct unseen words")
        assert res["unseen_words"]["distinct_unseen_words"] == k - literal
        assert u["ppl"] == pytest.approx(upp, rel=1e-5)
        assert f"/ {k:,} OOV types, the text's distinct unseen words" in capsys.readouterr().out
    given = evaluate(folder, tmp_path / "raw.txt", "--batch_size", "2", "--oov_types", "50")["upp"]
    assert (given["oov_types"], given["oov_types_from"], given["bound"]) == (50, "--oov_types", False)
    assert given["ppl"] > u["ppl"]


def test_corpus_text_without_unseen_words_scores_as_before(folder, tmp_path, capsys):
    """(d) Text in corpus form (known words and literal <unk>, no unseen word) reads exactly its cached ids: the
    figures equal the closed reading's and the model's own loss, and UPP counts each <unk> as a type of its own."""
    text = "".join(line for line in raw_text(2, literal_unk=True).splitlines(keepends=True)
                   if not any(w in UNSEEN for w in line.split()))  # fmt: skip
    (tmp_path / "corpus.txt").write_text(text)
    rows, cfg = streams_by_hand(folder, text, 2)
    unk_targets = sum(row[1:].count("<unk>") for _, _, row in rows)
    assert unk_targets > 0

    res = evaluate(folder, tmp_path / "corpus.txt", "--batch_size", "2")
    out = capsys.readouterr().out
    before = evaluate(folder, tmp_path / "corpus.txt", "--batch_size", "2", "--unseen_as_unk")
    for key in ("ppl", "ppl_pointer_off", "upp"):
        assert res[key] == before[key], key
    assert res["ppl"] == pytest.approx(math.exp(sum(o.loss.item() for _, o, _ in rows) / 2), rel=1e-5)
    assert res["upp"]["oov_types"] == unk_targets and res["upp"]["bound"]
    assert res["upp"]["oov_types_from"] == "each <unk> a word of its own"
    assert res["unseen_words"]["reading"] == "cached ids" and res["unseen_words"]["placeholder_targets"] == 0
    n = res["tokens"]
    assert f"measure: perplexity over all {n:,} targets; <unk> ({unk_targets / n:.2%} of them) scored as a word" in out
    assert "placeholders" not in out


def test_dynamic_evaluation_reads_the_placeholders_as_one_stream(folder, tmp_path):
    """--dynamic scores the split as one stream with its placeholders numbered as the tokenizer numbers the whole
    text's: its static batch-1 figure is the one-stream `labels=` loss, as the batch-1 perplexity is."""
    text = raw_text(3, literal_unk=False)
    (tmp_path / "raw.txt").write_text(text)
    ((ids, out, _),), _ = streams_by_hand(folder, text, 1)
    res = evaluate(folder, tmp_path / "raw.txt", "--batch_size", "1", "--train_file", str(folder.parent / "train.txt"),
                   "--dynamic", "--dynamic_stats_tokens", "0")  # fmt: skip
    assert res["dynamic"]["static_ppl_batch_1"] == pytest.approx(math.exp(out.loss.item()), rel=1e-5)
    assert math.isfinite(res["ppl_dynamic"])


def test_compare_with_a_model_that_cannot_read_the_placeholders_is_one_error_line(folder, tmp_path, capsys):
    text = raw_text(4, literal_unk=False)
    (tmp_path / "raw.txt").write_text(text)
    closed = tmp_path / "closed"
    cfg = AutoModelForCausalLM.from_pretrained(folder).config
    tiny_model(vocab_size=cfg.vocab_size, unk_token_id=cfg.unk_token_id, eos_token_id=cfg.eos_token_id,
               pointer_window=10).save_pretrained(closed)  # fmt: skip
    with pytest.raises(SystemExit) as stop:
        evaluate(folder, tmp_path / "raw.txt", "--train_file", str(folder.parent / "train.txt"), "--compare",
                 str(closed))  # fmt: skip
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert stop.value.code == 2 and len(err) == 1 and "error: --compare" in err[0] and "oov_slots 0" in err[0]


def test_a_reading_that_differs_from_the_token_cache_is_one_error_line(folder, tmp_path, capsys, monkeypatch):
    """The placeholders' reading is checked id for id against the token cache: a reading that lost a token (a
    tokenizer out of step with the cache) stops with one error line, before anything is scored."""
    script = sys.modules[evaluate_script().__module__]  # examples/evaluate.py, as the other tests run it
    (tmp_path / "raw.txt").write_text(raw_text(5, literal_unk=False))
    read = script.unseen_word_batches

    def lost_a_token(*args):  # the reading, a batch at a time, with its first id lost
        for i, ids in enumerate(read(*args)):
            yield ids[1:] if i == 0 else ids

    monkeypatch.setattr(script, "unseen_word_batches", lost_a_token)
    with pytest.raises(SystemExit) as stop:
        evaluate(folder, tmp_path / "raw.txt", "--batch_size", "1")
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert stop.value.code == 2 and len(err) == 1 and "differs from its cached ids" in err[0]
    assert "--unseen_as_unk" in err[0]
