"""The lifetime of a job's processes under ``paddle.distributed.launch``: a bound on how long each may
run, a probe of the server's port before brpc binds it, and the line a process prints when it ends well."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

from ..errors import EdoRuntimeError


class Watchdog:
    """A process that, after ``seconds`` unless cancelled, says why on this process's stdout and kills it
    (which fails the launcher's job). A process, not a timer thread: a trainer stalled in Paddle's C++
    start-up barriers holds the GIL, so a thread never runs (seen: geo trainers stalled past every bound
    while another process kept a core busy). It ends by itself within half a second of this process, which
    it checks for twice a second (a watchdog that slept its whole bound outlived short jobs by up to
    distributed.timeout_s)."""

    _CODE = ("import os, signal, sys, time\n"
             "parent, seconds, reason = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]\n"
             "deadline = time.monotonic() + seconds\n"
             "while time.monotonic() < deadline:\n"
             "    if os.getppid() != parent:\n"
             "        sys.exit(0)\n"
             "    time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))\n"
             "if os.getppid() == parent:\n"
             "    print(f'paddle_edo: {reason}; exiting', flush=True)\n"
             "    os.kill(parent, signal.SIGKILL)\n")

    def __init__(self, seconds: int, reason: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", self._CODE, str(os.getpid()), str(seconds), reason],
                                        stdin=subprocess.DEVNULL)

    def cancel(self) -> None:
        self.process.kill()
        self.process.wait()


def exit_after(seconds: int, reason: str) -> Watchdog:
    """Bound this process: after ``seconds`` (unless cancelled) it is stopped, saying why."""
    return Watchdog(seconds, reason)


FINISHED = "paddle_edo: finished as"  # the last line of every process that ended normally (tools/launch.py)


class ServerStartError(EdoRuntimeError):
    """A parameter server cannot serve on the endpoint the launcher gave it."""


def check_listenable(endpoint: str, role: str) -> None:
    """Refuse to start a server on a port another process holds (bound as brpc binds it). brpc would only
    log 'Fail to listen' and return, and the trainers would wait for the server until the job's timeout;
    a server that fails makes the launcher stop the job at once."""
    host, port = endpoint.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
        except OSError as exc:
            raise ServerStartError(f"{role}: cannot listen on {endpoint} ({exc.strerror}): another process holds "
                                   f"the port the launcher chose; start the job again") from None
