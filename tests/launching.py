"""Processes the tests start (train.py, `accelerate launch` and its ranks) never outlive their test.

Each command runs in its own session, so it and everything it starts (a launcher's ranks) form one process group;
the whole group is SIGKILLed when the command ends, fails, times out or the test stops (an exception, Ctrl-C,
pytest -x). A watchdog process kills the group too if the test process itself dies without its teardown (a pytest
worker killed): the ranks would otherwise live on with PPID 1, each waiting in a collective for the others.
"""

import contextlib
import os
import signal
import subprocess
import sys

# Polls whether its owner (the test process, its parent) still lives and whether the group still exists.
WATCHDOG = """
import os, signal, sys, time
owner, group = int(sys.argv[1]), int(sys.argv[2])
while os.getppid() == owner:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        sys.exit(0)
    time.sleep(0.5)
try:
    os.killpg(group, signal.SIGKILL)
except ProcessLookupError:
    pass
"""


def kill_group(group: int):
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def group_members(group: int) -> list[int]:
    """The live (not zombie) processes of a process group, from /proc (Linux)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
            except OSError:  # ended meanwhile
                continue
            if int(fields[2]) == group and fields[0] != "Z":
                members.append(int(entry))
    return members


@contextlib.contextmanager
def process_group(cmd, **popen_kwargs):
    """Popen(cmd) in a session of its own; on exit, whatever happened, its whole process group is killed."""
    proc = subprocess.Popen(cmd, start_new_session=True, **popen_kwargs)
    watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), str(proc.pid)])
    try:
        yield proc
    finally:
        kill_group(proc.pid)
        proc.wait()
        watchdog.kill()
        watchdog.wait()


def run(cmd, timeout=600, **popen_kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True), with the command's process group killed at its end."""
    with process_group(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_kwargs) as proc:
        stdout, stderr = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
