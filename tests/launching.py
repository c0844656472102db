"""Processes the tests start (train.py, `accelerate launch` and its ranks) never outlive their test.

Each command runs in a session of its own, with a token in its environment that every process it starts inherits.
A launcher's ranks cannot be reached through its process group: torch's elastic agent starts each rank in a session of
its own, and a rank whose launcher is gone lives on with PPID 1. So at the command's end (its exit, a failure, a
timeout, the test stopping: an exception, Ctrl-C, pytest -x) every process that carries the token is SIGKILLed,
wherever it has gone; and a watchdog process does the same if the test process itself dies without its teardown (a
pytest worker killed). Linux: the processes are found through /proc.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid

TOKEN = "POINTER_SENTINEL_TEST_LAUNCH"

# Kills the launch's processes once its owner (the test process, its parent) is gone; ends when they are all gone.
WATCHDOG = """
import os, sys, time
sys.path.insert(0, sys.argv[3])
import launching
owner, token = int(sys.argv[1]), sys.argv[2]
while os.getppid() == owner:
    if not launching.members(token):
        sys.exit(0)
    time.sleep(0.5)
launching.kill_all(token)
"""


def members(token: str) -> list[int]:
    """The live (not zombie) processes whose environment carries `token`."""
    mark, found = f"{TOKEN}={token}".encode(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if mark not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]  # after the command name, which may hold spaces
        except OSError:  # ended meanwhile, or not ours
            continue
        if state != "Z":
            found.append(int(entry))
    return found


def kill_all(token: str):
    """SIGKILL every process that carries `token`, again until none is left (one may have started another)."""
    for _ in range(100):
        if not (pids := members(token)):
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


@contextlib.contextmanager
def process_group(cmd, env=None, **popen_kwargs):
    """Popen(cmd) in a session of its own, marked with a token (`proc.token`); on exit, whatever happened, every
    process that carries the token is killed."""
    token = uuid.uuid4().hex
    env = {**(os.environ if env is None else env), TOKEN: token}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, **popen_kwargs)
    proc.token = token
    here = os.path.dirname(os.path.abspath(__file__))
    watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), token, here])
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        kill_all(token)
        proc.wait()
        watchdog.kill()
        watchdog.wait()


class Stuck(AssertionError):
    """A command that outlived its timeout, with where each of its Python processes stood (faulthandler's stacks)."""


def run(cmd, timeout=600, **popen_kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True), with every process the command started killed at its end.
    On a timeout, every process still alive is asked for its Python stacks (SIGABRT to faulthandler, enabled for them
    all) before the kill, and `Stuck` names them with those stacks: a rare hang in CI says where it hung."""
    env = {**(popen_kwargs.pop("env", None) or os.environ), "PYTHONFAULTHANDLER": "1"}
    with process_group(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **popen_kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            exited, stuck = proc.poll() is not None, members(proc.token)
            alive = [f"{pid} {_cmdline(pid)}" for pid in stuck]
            for pid in stuck:  # one at a time: stacks written together interleave
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGABRT)
                for _ in range(50):
                    if pid not in members(proc.token):
                        break
                    time.sleep(0.1)
            try:  # the stacks arrive on the pipes, which close once every writer is gone
                stdout, stderr = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                kill_all(proc.token)
                stdout, stderr = proc.communicate()
            said = [f"timed out after {timeout} s; still running then (the launcher had exited: {exited}):", *alive]
            said += ["--- stdout (end):", stdout[-3000:], "--- stderr (end, with the stacks):", stderr[-20000:]]
            raise Stuck("\n".join(said)) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")[:300]
    return "?"
