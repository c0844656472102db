"""The suite's own set-up (tests/conftest.py): `-n auto` starts one worker per core the machine lets it use."""

import os

from conftest import pytest_xdist_auto_num_workers, usable_cores


def test_workers_follow_the_cpu_affinity_under_the_cgroup_quota(tmp_path, monkeypatch):
    cpu_max = tmp_path / "cpu.max"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert usable_cores(cpu_max) == 8  # no cgroup v2 file: the affinity
    cpu_max.write_text("max 100000\n")
    assert usable_cores(cpu_max) == 8  # no quota
    cpu_max.write_text("200000 100000\n")
    assert usable_cores(cpu_max) == 2  # a 2-CPU container on an 8-core host
    cpu_max.write_text("1600000 100000\n")
    assert usable_cores(cpu_max) == 8  # a quota above the affinity
    cpu_max.write_text("50000 100000\n")
    assert usable_cores(cpu_max) == 1  # half a CPU still gets one worker


def test_auto_asks_usable_cores_unless_the_worker_count_is_given(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    assert pytest_xdist_auto_num_workers(None) == usable_cores()
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert pytest_xdist_auto_num_workers(None) is None  # xdist's own hook reads the variable
