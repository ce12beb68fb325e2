"""A timing run on a thread of its own, so the page that started it stays live and its Stop button is heard.

Run in the page's own script, a run held the script until it ended: a click on another button interrupted the
script at its next progress update and threw the run away. Here the page starts a :class:`BackgroundRun`,
shows its progress on a timer and a Stop button that sets the run's stop event; the engine then cancels the
requests still live (error ``stopped_by_user``) and writes the run folder of what ran, which the page opens.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from servebench.errors import ServebenchError
from servebench.records.rundir import RECORDS
from servebench.serving.engine.readback import MeasuredRun, read_run
from servebench.serving.engine.timing_run import execute_run
from servebench.serving.scenario import Scenario


class BackgroundRun:
    """One timing run in a thread: its progress, a stop, and once it ended its run folder or its error."""

    def __init__(self, scenario: Scenario, **options: Any) -> None:
        """Prepare the run of ``scenario``; ``options`` go to ``execute_run`` (model, device, threads, max_wall_s)."""
        self.scenario = scenario
        self.options = options
        self.total = 0
        self.ended = 0
        self.sent = 0
        self.meta: dict[str, Any] | None = None
        self.error: ServebenchError | None = None
        self._stop = threading.Event()
        self._folder = Path(tempfile.mkdtemp(prefix="servebench-run-"))
        self._thread = threading.Thread(target=self._run, name="servebench-timing-run", daemon=True)

    def start(self) -> BackgroundRun:
        """Start the run; return it."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the run to end now: live requests are cancelled, unsent ones never offered."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked for."""
        return self._stop.is_set()

    @property
    def done(self) -> bool:
        """Whether the run has ended (written, or failed)."""
        return not self._thread.is_alive() and (self.meta is not None or self.error is not None)

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the run to end; return whether it has."""
        self._thread.join(timeout_s)
        return self.done

    def _progress(self, ended: int, sent: int, total: int) -> None:
        self.ended, self.sent, self.total = ended, sent, total

    def _run(self) -> None:
        try:
            self.meta = execute_run(self.scenario, self._folder / "run", progress=self._progress, stop=self._stop,
                                    **self.options)
        except ServebenchError as exc:  # a user's setting (a device not there, a bad scenario): shown as one line
            self.error = exc

    def result(self) -> tuple[dict[str, Any], MeasuredRun, bytes]:
        """Return the ended run's metadata, its folder as read back, and its records file's bytes; then clean up."""
        if self.meta is None:
            raise RuntimeError("the run has not ended with a run folder")  # a caller's bug, not a user's input
        try:
            folder = read_run(self._folder / "run")
            return self.meta, folder, (self._folder / "run" / RECORDS).read_bytes()
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove the run's temporary folder."""
        shutil.rmtree(self._folder, ignore_errors=True)
