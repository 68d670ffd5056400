"""A private ``redis-server`` on a free local port, for trying the Redis export and for tests and
benchmarks: started, stopped and started again on the same port and data folder (its append-only file
keeps the data across a restart, as a production server's persistence would)."""
from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import EdoFileNotFoundError, EdoRuntimeError

INSTALL_HINT = ("install it: Debian/Ubuntu `apt-get install redis-server`, macOS `brew install redis`, "
                "or any Redis >= 6 reachable by URL")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRedisServer:
    """``redis-server`` on 127.0.0.1:``port`` (a free one by default) keeping its data in ``folder`` (a
    temporary one by default). ``settings``: more redis.conf lines as {name: value}, e.g.
    {"proto-max-bulk-len": "1mb"}. Use as a context manager, or call ``start()``/``stop()``."""

    def __init__(self, port: int | None = None, folder: str | Path | None = None,
                 settings: dict[str, str] | None = None) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise EdoFileNotFoundError(f"redis-server is not installed; {INSTALL_HINT}")
        self.port = port or free_port()
        self._own_folder = folder is None
        self.folder = Path(tempfile.mkdtemp(prefix="paddle_edo-redis-") if folder is None else folder)
        self.settings = dict(settings or {})
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> "LocalRedisServer":
        """Start the server (again) and wait until it answers."""
        if self.process is not None and self.process.poll() is None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        arguments = {"port": str(self.port), "bind": "127.0.0.1", "dir": str(self.folder), "save": "",
                     "appendonly": "yes", "appendfsync": "always", "daemonize": "no", "protected-mode": "yes",
                     **self.settings}
        command = [self.binary]
        for name, value in arguments.items():
            command += [f"--{name}", value]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.process.stdout.read().decode(errors="replace").strip().splitlines()
                raise EdoRuntimeError(f"redis-server on port {self.port} stopped at start: "
                                      f"{output[-1] if output else 'no output'}")
            if self._answers():
                return self
            time.sleep(0.02)
        self.stop()
        raise EdoRuntimeError(f"redis-server on port {self.port} did not answer within {timeout_s} s")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server (SIGTERM: it writes its append-only file and exits)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.process = None

    def close(self) -> None:
        """Stop, and remove the data folder if it was a temporary one."""
        self.stop()
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "LocalRedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
