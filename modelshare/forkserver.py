"""A fork server for `modelshare simulate`'s parties: the miner's and the owners' code imported once, each party forked.

``python -m modelshare.forkserver`` imports what ``modelshare miner serve`` and ``modelshare owner serve``
import (their commands' modules, the learners, the mining code), then forks one process per request of its
parent. Each fork is a party of its own: a new session, its own address space, stdin from /dev/null, stdout and
stderr to its log, and it runs `modelshare.cli.main` on its arguments and exits with its status as ``python -m
modelshare.cli ARGS`` does; its ``atexit`` handlers run, but not the interpreter's teardown of its modules
(`_leave`). The server holds no config, key, socket, gRPC channel or thread of its own when it forks, so each
party reads its own config, keys, TLS identity and store, as a separately started process does; what the parties
share is the imported code (copy-on-write pages), which every interpreter started from the same installation
loads anyway. Only the start-up (interpreter and imports, about 1.5 s of CPU per party) is paid once instead of
once per party.

Protocol (JSON lines on the server's stdin and stdout): the server says ``{"ready": true}`` once it has
imported; ``{"start": ARGS, "log": PATH}`` forks a party and is answered ``{"started": PID}``;
``{"signal": PID, "number": SIG}`` signals a party the server has not yet reaped (so never a reused
pid); the server reports ``{"exited": PID, "status": CODE}`` as it reaps each one (negative: killed by
that signal, as `subprocess.Popen.returncode`). At end of input the server sends SIGTERM to every
party still running, SIGKILL after `STOP_GRACE_SECONDS`, reaps them and exits, so a parent that dies
leaves no party behind. `ForkServer` is the parent's side; its `Forked` handles offer the part of
`subprocess.Popen` the simulator uses (``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``).
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any, NoReturn

__all__ = ["PRELOADED_COMMANDS", "STOP_GRACE_SECONDS", "ForkServer", "Forked", "ForkServerError"]

#: The commands whose modules the server imports before it forks (`modelshare.cli.build_parser` of each).
PRELOADED_COMMANDS = (("miner", "serve"), ("owner", "serve"))
#: Modules the parties import once they work (training, release, mining) rather than at start-up.
PRELOADED_MODULES = (
    "modelshare.common.mechanisms.train_release",
    "modelshare.miner_node.mining",
)
#: Seconds the server gives its parties after SIGTERM when its input ends, before SIGKILL.
STOP_GRACE_SECONDS = 10.0


class ForkServerError(RuntimeError):
    """The fork server did not start, or stopped answering; the message says which and shows its log's tail."""


# ------------------------------------------------------------------ the server process
def _preload() -> None:
    import importlib

    from modelshare.cli import build_parser

    for path in PRELOADED_COMMANDS:
        build_parser(path)
    for module in PRELOADED_MODULES:
        importlib.import_module(module)


def _send(message: dict[str, Any]) -> None:
    try:
        os.write(1, (json.dumps(message) + "\n").encode())
    except BrokenPipeError:  # the parent is gone; the end of input that follows stops the parties
        pass


def _serve() -> tuple[list[str], str] | None:
    """The server's loop; returns in a forked child (its arguments and log), None in the server at its end."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD reaches the wake-up pipe
    signal.set_wakeup_fd(wake_w)
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    live: set[int] = set()
    pending = b""
    ending_at: float | None = None
    _send({"ready": True})
    while live or ending_at is None:
        timeout = None if ending_at is None else max(0.0, ending_at - time.monotonic())
        for key, _ in selector.select(timeout):
            if key.fd == wake_r:
                os.read(wake_r, 4096)
                continue
            chunk = os.read(0, 65536)
            if not chunk:  # the parent is gone or done: stop whoever is left
                selector.unregister(0)
                ending_at = time.monotonic() + STOP_GRACE_SECONDS
                for pid in live:
                    os.kill(pid, signal.SIGTERM)
                continue
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                if "start" in request:
                    pid = os.fork()
                    if pid == 0:
                        selector.close()
                        signal.set_wakeup_fd(-1)
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        os.close(wake_r)
                        os.close(wake_w)
                        return list(request["start"]), str(request["log"])
                    live.add(pid)
                    _send({"started": pid})
                elif "signal" in request and request["signal"] in live:
                    os.kill(request["signal"], request["number"])
        while live:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            live.discard(pid)
            _send({"exited": pid, "status": os.waitstatus_to_exitcode(status)})
        if ending_at is not None and time.monotonic() >= ending_at:
            for pid in live:
                os.kill(pid, signal.SIGKILL)
            ending_at = time.monotonic() + 1.0
    return None


def _become_party(args: list[str], log: str) -> int:
    """In the forked child: detach, point stdin, stdout and stderr where a spawned party's would be, run the CLI."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
    sys.argv = ["modelshare", *args]
    from modelshare.cli import main

    try:
        return main(args)
    except SystemExit as exc:  # as the interpreter maps it to a status
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def _leave(status: int) -> NoReturn:
    """End a party (or the server): flush its output, run its ``atexit`` handlers (logging's flush among them), then
    `os._exit`.

    What is skipped is the interpreter's teardown of every imported module, about 0.7 s of CPU per party
    on this code base, which a forked process (like `multiprocessing`'s forked children) does not owe.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _main() -> NoReturn:
    _preload()
    child = _serve()
    _leave(0 if child is None else _become_party(*child))


# ------------------------------------------------------------------ the parent's side
class Forked:
    """A party the fork server started: the part of `subprocess.Popen` the simulator uses."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid

    def poll(self) -> int | None:
        """The exit status once the server has reaped the party, else None."""
        return self.server.status(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; `subprocess.TimeoutExpired` if the party is still running after ``timeout`` seconds."""
        return self.server.wait(self.pid, timeout)

    def send_signal(self, number: int) -> None:
        """Signal the party unless it has exited (the server signals only a child it has not reaped)."""
        self.server.signal(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The parent's handle on a ``python -m modelshare.forkserver`` process; `start` it, `fork` parties, `close` it.

    A thread reads the server's replies: each started pid and each exit status as the server reaps it.
    """

    def __init__(self, log: Path) -> None:
        self.log = log
        handle = open(log, "wb")
        self.process = subprocess.Popen([sys.executable, "-m", "modelshare.forkserver"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=handle, start_new_session=True)
        handle.close()
        self._changed = threading.Condition()
        self._ready = False
        self._ended = False
        self._started: list[int] = []
        self._exits: dict[int, int] = {}
        self._lock = threading.Lock()  # one request at a time, so replies pair with requests
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,), name="forkserver-replies",
                                        daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            reply = json.loads(line)
            with self._changed:
                if "ready" in reply:
                    self._ready = True
                elif "started" in reply:
                    self._started.append(int(reply["started"]))
                elif "exited" in reply:
                    self._exits[int(reply["exited"])] = int(reply["status"])
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def _tail(self) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-15:]) or "(empty log)"

    def wait_ready(self, timeout: float) -> None:
        """Block until the server has imported everything, or raise `ForkServerError` naming why."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._ready or self._ended, timeout):
                raise ForkServerError(f"the fork server did not start within {timeout:.0f} s; its log ends with:\n"
                                      f"{self._tail()}")
            if not self._ready:
                raise ForkServerError(f"the fork server exited while starting; its log ends with:\n{self._tail()}")

    def _request(self, message: dict[str, Any]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write((json.dumps(message) + "\n").encode())
            stdin.flush()
        except (BrokenPipeError, ValueError):
            raise ForkServerError(f"the fork server is gone; its log ends with:\n{self._tail()}") from None

    def fork(self, args: list[str], log: Path) -> Forked:
        """Fork a party that runs ``modelshare ARGS`` with stdout and stderr to ``log``."""
        with self._lock:
            self._request({"start": list(args), "log": str(log)})
            with self._changed:
                self._changed.wait_for(lambda: bool(self._started) or self._ended)
                if not self._started:
                    raise ForkServerError(f"the fork server stopped before forking; its log ends with:\n{self._tail()}")
                return Forked(self, self._started.pop(0))

    def status(self, pid: int) -> int | None:
        with self._changed:
            return self._exits.get(pid)

    def wait(self, pid: int, timeout: float | None) -> int:
        with self._changed:
            if not self._changed.wait_for(lambda: pid in self._exits or self._ended, timeout):
                raise subprocess.TimeoutExpired(f"party {pid}", timeout or 0.0)
            if pid not in self._exits:
                raise ForkServerError(f"the fork server ended before party {pid} did; its log ends with:\n"
                                      f"{self._tail()}")
            return self._exits[pid]

    def signal(self, pid: int, number: int) -> None:
        if self.status(pid) is None:
            with self._lock:
                self._request({"signal": pid, "number": int(number)})

    def close(self, timeout: float = STOP_GRACE_SECONDS + 5) -> None:
        """End the server's input (it stops any party still running) and wait for it; idempotent."""
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            try:
                stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=5)


if __name__ == "__main__":
    _main()
