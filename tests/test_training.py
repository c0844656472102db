"""modeling_pointer_sentinel/training.py's run control on its own, without examples/train.py: the epoch-end schedule
(LR decay on a stall, NT-ASGD's start, the early stop), the stop signal, the memory check, a new model's config and the
streams' checks. (The time limit's unit test is tests/test_train.py's
test_time_limit_decision_is_made_every_step_near_the_limit.)"""

import math
import os
import signal
import threading

import numpy as np
import pytest
import torch
from conftest import tiny_config, tiny_model

from modeling_pointer_sentinel import PointerSentinelForCausalLM
from modeling_pointer_sentinel.checkpointing import TrainState
from modeling_pointer_sentinel.data import TextSource, split_arrays, token_file
from modeling_pointer_sentinel.evaluation import collect_outputs, mean_nll, validate
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary
from modeling_pointer_sentinel.training import (
    ParameterAverager,
    PlateauSchedule,
    RunningLoss,
    StopSignal,
    check_fits,
    check_streams,
    check_unk_rates,
    config_for_tokenizer,
    encode_lines,
    make_optimizer,
    rank_streams,
    shard_streams,
    simulate_unseen_training_words,
    simulate_unseen_words,
    unk_token_id,
)


def run_schedule(schedule, losses, lr=1.0):
    """Each loss through `schedule.step`, as train.py calls it at its epoch ends: per validation, (improved, started,
    the LR after it, the stop reason), stopping at the first stop."""
    state, averager = TrainState(lr), ParameterAverager([torch.nn.Parameter(torch.zeros(2))])
    rows = []
    for loss in losses:
        improved, started = schedule.step(state, loss, averager)
        rows.append((improved, started, state.lr, schedule.stop_reason(state)))
        if rows[-1][3]:
            break
    return rows, state, averager


def test_plateau_schedule_decays_the_lr_on_each_stall_and_stops_after_patience_stalls_in_a_row():
    schedule = PlateauSchedule(lr_decay=0.5, patience=2)
    rows, state, averager = run_schedule(schedule, [5.0, 5.0, 4.0, 4.5, 4.0, 3.0])
    assert [r[:3] for r in rows] == [(True, False, 1.0), (False, False, 0.5), (True, False, 0.5),
                                     (False, False, 0.25), (False, False, 0.125)]  # fmt: skip
    assert [r[3] for r in rows] == [None] * 4 + ["validation did not improve for 2 evaluations in a row"]
    assert state.val_losses == [5.0, 5.0, 4.0, 4.5, 4.0] and state.best_val == 4.0 and not averager.active


def test_plateau_schedule_counts_a_gain_below_min_improvement_as_a_stall():
    schedule = PlateauSchedule(lr_decay=0.1, patience=1, min_improvement=0.01)
    rows, state, _ = run_schedule(schedule, [5.0, 5.0 + math.log(0.995)])  # 0.5% better perplexity: a stall
    assert [r[:3] for r in rows] == [(True, False, 1.0), (False, False, pytest.approx(0.1))]
    assert rows[-1][3] == "validation did not improve by 1.0% for 1 evaluations in a row" and state.best_val == 5.0


def test_plateau_schedule_ntasgd_starts_the_average_at_the_trigger_or_the_patience_then_decays():
    # the non-monotone trigger (nonmono 2: worse than the best of all but the last 2 earlier losses, after 3 of them)
    rows, state, averager = run_schedule(PlateauSchedule(0.5, patience=5, ntasgd=True, nonmono=2), [3, 4, 4.1, 3.5])
    assert [r[:3] for r in rows] == [(True, False, 1.0), (False, False, 1.0), (False, False, 1.0), (False, True, 1.0)]
    assert averager.active and state.bad_epochs == 0  # the patience judges the average from its start
    # the trigger never fires: `patience` stalls start the average instead of ending the run, then stalls decay the LR
    schedule = PlateauSchedule(0.5, patience=2, ntasgd=True, nonmono=10)
    rows, state, averager = run_schedule(schedule, [4, 4, 4, 4, 4])
    assert [r[:3] for r in rows] == [(True, False, 1.0), (False, False, 1.0), (False, True, 1.0),
                                     (False, False, 0.5), (False, False, 0.25)]  # fmt: skip
    assert averager.active and rows[-1][3] == "validation did not improve for 2 evaluations in a row"


def test_check_fits_refuses_the_model_that_needs_more_than_the_device_has():
    config = tiny_config()
    params = sum(p.numel() for p in PointerSentinelForCausalLM(config).parameters())
    window = 3 * config.pointer_window * (4 * config.output_size + 8 + 1)  # 3 streams' states, ids and mask
    for optimizer, copies in (("sgd", 2), ("ntasgd", 3), ("adamw", 4)):
        need = 4 * params * copies + window
        check_fits(config, 3, optimizer, available=need)  # exactly enough
        with pytest.raises(ValueError, match=f"{params:,} parameters x {copies} float32 copies with {optimizer}"):
            check_fits(config, 3, optimizer, available=need - 1)
    with pytest.raises(ValueError, match="pointer window of 1,000,000,000"):  # the window counts, per stream
        check_fits(tiny_config(pointer_window=1_000_000_000), 1, "sgd")


class Trigger:
    """accelerate's trigger in one process: set_trigger raises the flag, check_trigger reads and lowers it."""

    def __init__(self):
        self.flag = False

    def set_trigger(self):
        self.flag = True

    def check_trigger(self):
        raised, self.flag = self.flag, False
        return raised


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1") or threading.current_thread() is not threading.main_thread(),
                    reason="signal handlers run in the main thread")  # fmt: skip
def test_stop_signal_is_asked_once_per_signal_and_from_another_rank():
    before = signal.getsignal(signal.SIGUSR1)
    try:
        stop, accelerator = StopSignal(), Trigger()
        assert not stop.asked(accelerator)
        os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs before the next line
        assert stop.asked(accelerator) and not stop.asked(accelerator)
        accelerator.set_trigger()  # another rank got it
        assert stop.asked(accelerator)
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert not StopSignal(signum=None).asked(Trigger())  # no signal, no handler


def test_config_for_tokenizer_takes_the_vocabulary_and_ids_from_the_tokenizer():
    tok = build_word_level_tokenizer(["a b c a", "b a"])
    config = config_for_tokenizer(tok, {"hidden_size": 8, "embedding_size": 8})
    eos = tok.eos_token_id
    assert config.vocab_size == len(tok) and config.eos_token_id == config.bos_token_id == config.pad_token_id == eos
    assert config.hidden_size == 8 and config.oov_slots == 0
    with pytest.raises(ValueError, match=r"^pad_token_id, vocab_size come from the tokenizer \(5 words, <eos> id"):
        config_for_tokenizer(tok, {"vocab_size": 9, "pad_token_id": 1})
    opened = open_vocabulary(tok, oov_slots=3)  # its placeholders are the model's, not words
    config = config_for_tokenizer(opened, {})
    assert (config.vocab_size, config.oov_slots, config.unk_token_id) == (len(tok), 3, opened.unk_token_id)


def test_check_streams_refuses_streams_too_short_for_the_scheme():
    check_streams(100, 4, "stateful", 50, window=200, stride=1)  # two segments of bptt, the window unused
    check_streams(100, 4, "window", 500, window=99, stride=98)  # bptt unused
    for tokens, scheme, bptt, window, stride, message in [
        (99, "stateful", 50, 8, 1, "Each of the 4 streams holds 99 tokens, less than 2 x bptt."),
        (99, "window", 1, 99, 1, "The pointer window (99) is longer than each training stream (99 tokens with 4"),
        (100, "window", 1, 8, 99, "--stride 99 is not shorter than each training stream (100 tokens with 4 streams)"),
    ]:
        with pytest.raises(ValueError) as refused:
            check_streams(tokens, 4, scheme, bptt, window, stride)
        assert str(refused.value).startswith(message)


# ---- train.py's start and its loop's pieces, in training.py (and evaluation.py, data.py) for a loop of one's own ----
def test_simulated_unseen_training_words_need_placeholders_and_a_block_as_long_as_the_window():
    ids = np.array([1, 2, 3, 1, 4, 5, 6, 2] * 5, dtype=np.uint16)  # a memory map's dtype
    config = tiny_config(vocab_size=7, oov_slots=4, pointer_window=4, unk_token_id=1)
    out, counts = simulate_unseen_training_words(ids, config, 1.0, 10, 8, seed=0)
    assert out.dtype == torch.int64 and counts.tolist() == torch.bincount(out).tolist()
    assert torch.equal(
        out, simulate_unseen_words(torch.from_numpy(ids.astype(np.int64)), 7, 4, 1.0, 10, 8, 0, window=4)
    )
    assert out.max() >= 7  # placeholders written
    with pytest.raises(ValueError, match=r"^--unseen_word_rate needs a model with oov_slots >= 2 \(placeholder"):
        simulate_unseen_training_words(ids, tiny_config(vocab_size=7), 0.5, 10, 8, seed=0)
    with pytest.raises(
        ValueError, match=r"^--unseen_word_block \(3\) must be at least the model's pointer_window \(4\)"
    ):
        simulate_unseen_training_words(ids, config, 0.5, 10, 3, seed=0)


def test_check_unk_rates_says_each_splits_rate_and_refuses_a_tokenizer_that_does_not_fit():
    tok = build_word_level_tokenizer(["a b c a", "b a"])
    unk = unk_token_id(tok)
    counts = {"train": np.bincount([unk, 2, 3, 3], minlength=len(tok)), "test": np.bincount([2, 3], minlength=len(tok))}
    said = []
    assert check_unk_rates(counts, tok, 0.25, say=said.append) == {"train": 0.25, "test": 0.0}
    assert said == ["<unk> rate: train 25.00% | test 0.00%"]
    with pytest.raises(ValueError) as refused:
        check_unk_rates(counts, tok, 0.2, say=said.append)
    assert str(refused.value).startswith("25.0% of the train tokens are <unk> (more than --max_unk_rate 0.2): the "
                                         "tokenizer does not fit this data")  # fmt: skip
    assert len(said) == 2  # said before it refuses


def test_make_optimizer_builds_the_named_optimizer_with_the_placeholders_rate():
    model = tiny_model(oov_slots=2, oov_pointer=True, unk_token_id=1)
    adamw = make_optimizer(model, "adamw", 0.5, 0.1, oov_lr=0.05)
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["weight_decay"] == 0.1
    assert [g["lr_scale"] for g in adamw.param_groups] == [1.0, pytest.approx(0.1)]
    for name in ("sgd", "ntasgd"):
        sgd = make_optimizer(model, name, 0.5, 0.1)
        assert type(sgd) is torch.optim.SGD and sgd.defaults["weight_decay"] == 0.1
        assert [g["lr_scale"] for g in sgd.param_groups] == [1.0, 1.0]


def test_rank_streams_shard_each_split_in_its_own_batch():
    ids = {"train": torch.arange(40), "validation": torch.arange(24), "test": torch.arange(12)}
    train, evals = rank_streams(ids, 2, 3, num_processes=2, process_index=1)
    assert torch.equal(train, shard_streams(ids["train"], 2, 2, 1)) and train.shape == (2, 10)
    assert set(evals) == {"validation", "test"} and evals["validation"].shape == (3, 4)
    assert torch.equal(evals["test"], shard_streams(ids["test"], 3, 2, 1))
    with pytest.raises(ValueError, match="cannot fill 6 streams"):
        rank_streams({"train": torch.arange(40), "test": torch.arange(11)}, 2, 3, num_processes=2)


class OneRank:
    """accelerate's reduce in one process."""

    device = torch.device("cpu")
    is_local_main_process = False
    num_processes = 1

    def reduce(self, tensor, reduction):
        return tensor

    def unwrap_model(self, model):
        return model


def test_running_loss_is_the_mean_per_target_since_its_last_read():
    running = RunningLoss()
    running.add(torch.tensor(6.0, requires_grad=True), 3)
    running.add(torch.tensor(2.0), 1)
    assert running.read(OneRank()) == 2.0
    running.add(torch.tensor(1.0), 4)
    assert running.read(OneRank()) == 0.25


def test_mean_nll_and_validate_score_the_average_and_the_live_weights():
    model = tiny_model()
    streams = torch.randint(0, 23, (2, 30), generator=torch.Generator().manual_seed(0))
    model.train()
    live = mean_nll(OneRank(), model, streams, 7)
    outputs = collect_outputs(model, streams, 7)
    model.train()
    assert live == pytest.approx(-outputs.log_probs.double().mean().item())
    averager = ParameterAverager(model.parameters())
    assert validate(OneRank(), model, streams, 7, averager) == (live, "model", {})  # no average yet
    averager.start()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)  # the live weights move away from the average
    moved = mean_nll(OneRank(), model, streams, 7)
    assert mean_nll(OneRank(), model, streams, 7, averager) == live and model.training  # swapped back, mode kept
    val, source, both = validate(OneRank(), model, streams, 7, averager)
    assert both == {"valid_ppl_average": math.exp(live), "valid_ppl_live": math.exp(moved)}
    assert (val, source) == min((live, "average"), (moved, "model"))


def test_split_arrays_map_each_split_and_refuse_an_empty_training_split(tmp_path):
    tok = build_word_level_tokenizer(["a b c a", "b a"])
    files = {}
    for split, text in (("train", "a b c a\nb a\n"), ("test", "\n")):
        (tmp_path / f"{split}.txt").write_text(text)
        files[split] = token_file(tok, TextSource(str(tmp_path / f"{split}.txt")), tmp_path / "cache", progress=False)
    with pytest.raises(ValueError, match="^The training split is empty.$"):
        split_arrays({"train": files["test"]})
    ids, counts = split_arrays(files)
    assert ids["train"].tolist() == encode_lines(tok, ["a b c a", "b a"]).tolist() and ids["test"].tolist() == [
        tok.eos_token_id
    ]
    assert counts["train"].tolist() == np.bincount(ids["train"], minlength=len(counts["train"])).tolist()
