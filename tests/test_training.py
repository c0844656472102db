"""modeling_pointer_sentinel/training.py's run control on its own, without examples/train.py: the epoch-end schedule
(LR decay on a stall, NT-ASGD's start, the early stop) and the memory check. (The time limit's unit test is
tests/test_train.py's test_time_limit_decision_is_made_every_step_near_the_limit.)"""

import math

import pytest
import torch
from conftest import tiny_config

from modeling_pointer_sentinel import PointerSentinelForCausalLM
from modeling_pointer_sentinel.checkpointing import TrainState
from modeling_pointer_sentinel.training import ParameterAverager, PlateauSchedule, check_fits


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
