"""The sender: a process that does nothing but keep the open-loop schedule (run as ``python -m`` by :mod:`handoff`).

It reads the plan (each request's bytes, its due and give-up instants), keeps TCP connections opened
ahead of the sends due within :data:`AHEAD_S`, and at each request's due instant writes it on one of
them, stamps the time and hands the connection's file descriptor to the generator over a Unix socket
(``SCM_RIGHTS``). The generator reads and parses the answer in its own process, so parsing streams
never holds this one's interpreter, and this one sleeps whenever nothing is due: a process that
sleeps is woken promptly by the kernel even beside processes that burn CPU. It keeps the generator's
connection limit: a request goes out only while fewer than the limit are in flight (the generator
says when each ends, handing back a connection the server kept alive), else it waits, and one that
cannot go before its give-up instant is reported unsent.

Only the standard library is imported, so the process starts in tens of milliseconds. Times are
``time.monotonic``, one clock for every process on the machine.

Messages (one datagram each on a ``SOCK_SEQPACKET`` pair), a kind byte then fields:
to the generator: ``R`` ready; ``S`` sent (index, sent instant, waited for a slot) with the descriptor;
``F`` failed to connect or write (index, sent instant or NaN, error text); ``U`` not sent by its
give-up instant (index, waited); ``E`` the plan is done. From the generator: ``G`` go (origin t0);
``B`` a request ended (a kept-alive connection's descriptor with it, or none); ``X`` stop now.
"""

from __future__ import annotations

import collections
import math
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Iterator

AHEAD_S = 0.25  # open connections for the sends due within this long (the rest reuse the ones handed back)
MAX_SPARE = 64  # never hold more idle connections than this
STALE_S = 2.0  # an idle connection older than this is closed (servers close idle keep-alive ones after ~5 s)
CONNECT_TIMEOUT_S = 5.0
WRITE_TIMEOUT_MAX_S = 3600.0  # a request with no deadline still gets a bound on its write
ITEM = struct.Struct("<qddI")  # plan file: index, due (s from t0), give-up (s from t0), payload bytes
HEAD = struct.Struct("<qdB")  # index, instant, waited
GO = struct.Struct("<d")
NICE = struct.Struct("<i")
NICE_WANTED = -10
MSG_BYTES = 4096


def write_plan(path: str, items: Iterator[tuple[int, float, float, bytes]]) -> None:
    """Write the plan file: per request its index, due and give-up times (s from the origin) and its bytes."""
    with open(path, "wb") as f:
        for index, due_s, give_up_s, payload in items:
            f.write(ITEM.pack(index, due_s, give_up_s, len(payload)))
            f.write(payload)


def read_plan(path: str) -> Iterator[tuple[int, float, float, bytes]]:
    """Yield the plan file's requests in order."""
    with open(path, "rb") as f:
        while head := f.read(ITEM.size):
            index, due_s, give_up_s, size = ITEM.unpack(head)
            yield index, due_s, give_up_s, f.read(size)


class Sender:
    """The sender's state: the control socket, the spare connections, the requests in flight."""

    def __init__(self, ctrl: socket.socket, host: str, port: int, max_in_flight: int) -> None:
        self.ctrl = ctrl
        self.address = (host, port)
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.spare: collections.deque[tuple[socket.socket, float]] = collections.deque()
        self.stopped = False
        self.connect_error: str | None = None

    def run(self, plan_path: str) -> None:
        """Wait for the go, then send the plan; return when it is done or the generator says stop."""
        self.ctrl.send(b"R" + NICE.pack(_raise_priority()))
        t0 = None
        while t0 is None and not self.stopped:
            t0 = self._handle(self._receive(None))
        if t0 is None:
            return
        items = list(read_plan(plan_path))
        for k, (index, due_s, give_up_s, payload) in enumerate(items):
            if self.stopped:
                return
            self._wait_until(t0 + due_s, t0, items, k)
            if self.stopped:
                return
            waited = self.in_flight >= self.max_in_flight
            while self.in_flight >= self.max_in_flight and not self.stopped:
                left = t0 + give_up_s - time.monotonic()
                if left <= 0:
                    break
                self._handle(self._receive(left))
            if self.stopped:
                return
            if self.in_flight >= self.max_in_flight or time.monotonic() >= t0 + give_up_s:  # a slot came too late
                self.ctrl.send(b"U" + HEAD.pack(index, math.nan, waited))
                continue
            self._send(index, payload, waited, t0 + give_up_s)
        self.ctrl.send(b"E")
        while not self.stopped:  # read the generator's last messages until it says stop: a Unix socket closed with
            self._handle(self._receive(None))  # unread messages resets the other end before it reads the E

    def _wait_until(self, due: float, t0: float, items: list, k: int) -> None:
        """Open connections ahead while there is time, answer the generator, and return at ``due``."""
        while not self.stopped:
            now = time.monotonic()
            if now >= due:
                return
            want = min(self.max_in_flight - self.in_flight, _due_before(items, k, now + AHEAD_S - t0))
            self._drop_stale(now)
            if len(self.spare) < want and self.connect_error is None and due - now > 0.002:
                self._open_spare()
                continue
            self._handle(self._receive(due - now))

    def _send(self, index: int, payload: bytes, waited: bool, give_up: float) -> None:
        """Write one request on a spare connection (or a new one) and hand the connection over.

        A server that does not read a long request holds this write, and the sends after it, at most until the
        request's give-up instant; then it fails as a write timeout.
        """
        for attempt in range(2):  # a kept-alive connection the server closed meanwhile: once more on a fresh one
            tried = time.monotonic()  # a request that cannot connect was still attempted then
            try:
                sock = self._take()
            except OSError as exc:
                self.ctrl.send(b"F" + HEAD.pack(index, tried, waited) + _text(exc))
                return
            try:
                sock.settimeout(min(max(give_up - time.monotonic(), 0.001), WRITE_TIMEOUT_MAX_S))
                sock.sendall(payload)  # non-blocking by the generator (one open file shared by both processes)
            except OSError as exc:
                sock.close()
                if attempt == 0:
                    continue
                self.ctrl.send(b"F" + HEAD.pack(index, time.monotonic(), waited) + _text(exc))
                return
            sent = time.monotonic()
            socket.send_fds(self.ctrl, [b"S" + HEAD.pack(index, sent, waited)], [sock.fileno()])
            sock.close()
            self.in_flight += 1
            return

    def _take(self) -> socket.socket:
        """Return the idle connection used last that still looks open (the oldest ones go stale), else connect now."""
        while self.spare:
            sock, _ = self.spare.pop()
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:  # an idle connection with something to read has been closed (or is broken)
                return sock
            sock.close()
        return self._connect()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=CONNECT_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        self.connect_error = None  # the server answers again: open ahead again
        return sock

    def _open_spare(self) -> None:
        try:
            self.spare.append((self._connect(), time.monotonic()))
        except OSError as exc:
            self.connect_error = _text(exc).decode()  # stop opening ahead; each send then tries (and reports) itself

    def _drop_stale(self, now: float) -> None:
        while self.spare and now - self.spare[0][1] > STALE_S:
            self.spare.popleft()[0].close()

    def _receive(self, timeout: float | None) -> tuple[bytes, list[int]] | None:
        readable, _, _ = select.select([self.ctrl], [], [], timeout)
        if not readable:
            return None
        try:
            data, fds, _, _ = socket.recv_fds(self.ctrl, MSG_BYTES, 1)
        except OSError:
            self.stopped = True
            return None
        return data, fds

    def _handle(self, msg: tuple[bytes, list[int]] | None) -> float | None:
        """Act on one message from the generator; return the origin t0 for a go."""
        if msg is None:
            return None
        data, fds = msg
        if not data or data[:1] == b"X":  # stop, or the generator went away
            self.stopped = True
        elif data[:1] == b"G":
            return GO.unpack(data[1:1 + GO.size])[0]
        elif data[:1] == b"B":
            self.in_flight = max(0, self.in_flight - 1)
            for fd in fds:
                if len(self.spare) < MAX_SPARE:
                    self.spare.append((socket.socket(fileno=fd), time.monotonic()))
                else:
                    os.close(fd)
        return None


def _due_before(items: list, k: int, until_s: float) -> int:
    """Return how many of the plan's requests from the k-th on are due before ``until_s`` (at most :data:`MAX_SPARE`).

    >>> _due_before([(0, 0.0), (1, 0.5), (2, 1.5)], 0, 1.0), _due_before([(0, 0.0)] * 99, 0, 1.0)
    (2, 64)
    """
    n = 0
    for j in range(k, min(len(items), k + MAX_SPARE)):
        if items[j][1] >= until_s:
            break
        n += 1
    return n


def _raise_priority() -> int:
    """Ask the kernel to favour this process (nice :data:`NICE_WANTED`); return the niceness it runs at.

    The sender uses little CPU, so a higher priority costs other processes little and keeps its wake-ups on time
    beside processes that burn CPU. Without the right to (no CAP_SYS_NICE) it stays where it was.
    """
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE_WANTED)
    except OSError:
        pass
    try:  # the sender leads a session of its own, so Linux's autogroup scheduling gives it a group of its own too
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(NICE_WANTED))
    except OSError:
        pass
    return os.getpriority(os.PRIO_PROCESS, 0)


def _text(exc: BaseException) -> bytes:
    detail = " ".join(str(exc).split())
    return (f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__).encode()[:MSG_BYTES - 64]


def main(argv: list[str]) -> None:
    """``python -m servebench.load.sender FD PLAN HOST PORT MAX_IN_FLIGHT``."""
    fd, plan_path, host, port, limit = argv
    ctrl = socket.socket(fileno=int(fd))
    try:
        Sender(ctrl, host, int(port), int(limit)).run(plan_path)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the generator is gone: nothing is waiting for the rest
    finally:
        ctrl.close()


if __name__ == "__main__":
    main(sys.argv[1:])
