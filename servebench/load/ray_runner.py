"""Sweep points as Ray tasks and load-generator workers as Ray actors; imported only when ``--ray`` is asked for.

:func:`ray_session` connects to an existing cluster (``ray.init(address=...)``) or starts a local
Ray for the call: loopback only, no dashboard, no usage reporting, its logs and sockets in a
temporary directory that is removed afterwards. Every node must have the same servebench
installed (checked by one task before the work starts).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from servebench.errors import ConfigError, ServebenchError, WorkerError
from servebench.load.generator import LoadConfig, LoadResult, PlannedRequest
from servebench.load.workers import WorkerRun, partition, run_part, run_workers
from servebench.serving.sweep import PointTask, SweepJob, SweepPoint

LOCAL_OBJECT_STORE_BYTES = 256 * 1024**2
INIT_TIMEOUT_S = 120.0


def _import_ray() -> Any:
    """Import Ray with a clear error when it is missing."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'ray==2.60.0' (see requirements.txt)") from None
    return ray


@dataclass(frozen=True)
class Cluster:
    """The Ray a command runs on."""

    address: str | None  # None: a local Ray started for this call
    cpus: float
    nodes: int


@contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[Cluster]:
    """Yield a connected Ray: ``address`` (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``) or a local one.

    A Ray this process already started (a notebook, a test fixture) is used as it is and left running.
    """
    if address is None:
        # before the first import: Ray then takes 127.0.0.1 as the node address, so every server it
        # starts listens on loopback only; and no usage statistics leave the machine
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = _import_ray()
    if ray.is_initialized():
        yield _cluster(ray, address)
        return
    temp_dir = None
    try:
        if address is None:
            temp_dir = tempfile.mkdtemp(prefix="servebench-ray-")
            ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False,
                     object_store_memory=LOCAL_OBJECT_STORE_BYTES, _temp_dir=temp_dir, log_to_driver=False,
                     logging_level="ERROR", configure_logging=True)
        else:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
            check_versions(ray)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise WorkerError(f"cannot start or reach {where}: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    try:
        yield _cluster(ray, address)
    finally:
        ray.shutdown()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


def _cluster(ray: Any, address: str | None) -> Cluster:
    resources = ray.cluster_resources()
    return Cluster(address=address, cpus=float(resources.get("CPU", 0)), nodes=len(ray.nodes()))


def _versions() -> tuple[str, str]:
    import sys

    from servebench import __version__
    return __version__, f"{sys.version_info.major}.{sys.version_info.minor}"


def check_versions(ray: Any) -> None:
    """Refuse a cluster whose nodes run another servebench or Python than this one."""
    remote = ray.get(ray.remote(num_cpus=0)(_versions).remote(), timeout=INIT_TIMEOUT_S)
    here = _versions()
    if tuple(remote) != here:
        raise WorkerError(f"the Ray cluster runs servebench {remote[0]} on Python {remote[1]}; this is servebench "
                          f"{here[0]} on Python {here[1]}: install the same version on every node")


def _unwrap(ray: Any, exc: Exception) -> ServebenchError:
    """Turn a Ray error into servebench's own: the task's own ServebenchError, or one line."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, ServebenchError):
        return cause
    first = str(cause or exc).strip().splitlines()
    return WorkerError(f"a Ray task failed: {first[-1] if first else type(exc).__name__}")


# --------------------------------------------------------------------------- sweeps


def _evaluate(job: SweepJob, task: PointTask) -> tuple[SweepPoint, int]:
    return job.evaluate(task)


class RayRunner:
    """Evaluate sweep points as Ray tasks (one CPU each), yielding each as it finishes."""

    parallel = True

    def __init__(self) -> None:
        self.ray = _import_ray()
        self.remote = self.ray.remote(num_cpus=1, max_retries=0)(_evaluate)
        self.jobs: dict[int, Any] = {}  # one object-store copy of each job

    def run(self, job: SweepJob, tasks: Sequence[PointTask]) -> Iterator[tuple[PointTask, SweepPoint, int]]:
        """Submit every task, then yield (task, point, KV budget) in order of completion."""
        ray = self.ray
        ref = self.jobs.get(id(job))
        if ref is None:
            ref = self.jobs[id(job)] = ray.put(job)
        pending = {self.remote.remote(ref, t): t for t in tasks}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for r in done:
                    task = pending.pop(r)
                    point, kv = ray.get(r)
                    yield task, point, kv
        except ray.exceptions.RayError as exc:
            raise _unwrap(ray, exc) from None
        finally:
            for r in pending:
                ray.cancel(r)


# --------------------------------------------------------------------------- load workers


class LoadActor:
    """A load-generator worker living in a Ray actor (one per CPU, spread over the nodes)."""

    def clock(self) -> float:
        """Return this worker's monotonic clock."""
        return time.monotonic()

    def run(self, config: LoadConfig, plan: list[PlannedRequest], start_at: float, worker: int) -> WorkerRun:
        """Send this worker's part of the schedule."""
        return run_part(config, plan, start_at, worker)


class _ActorWorker:
    """The coordinator's handle on one :class:`LoadActor`."""

    def __init__(self, ray: Any, actor: Any) -> None:
        self.ray = ray
        self.actor = actor
        self.pending: Any = None

    def clock(self) -> float:
        return self._get(self.actor.clock.remote())

    def submit(self, config: LoadConfig, plan: list[PlannedRequest], start_at: float, worker: int) -> None:
        self.pending = self.actor.run.remote(config, plan, start_at, worker)

    def result(self) -> WorkerRun:
        return self._get(self.pending)

    def stop(self) -> bool:
        return False  # a running actor call cannot be asked to end early: the coordinator gives up on it

    def _get(self, ref: Any) -> Any:
        try:
            return self.ray.get(ref, timeout=None)
        except self.ray.exceptions.RayError as exc:
            raise _unwrap(self.ray, exc) from None


def run_with_actors(config: LoadConfig, plan: Sequence[PlannedRequest], workers: int, model: str,
                    cluster: Cluster) -> LoadResult:
    """Run the plan from ``workers`` Ray actors, spread over the cluster's nodes."""
    partition(plan, workers)
    if workers > cluster.cpus:
        raise ConfigError(f"--workers {workers}: the Ray cluster has {cluster.cpus:g} CPUs (one per worker)")
    ray = _import_ray()
    cls = ray.remote(num_cpus=1, max_restarts=0, scheduling_strategy="SPREAD")(LoadActor)
    actors = [cls.remote() for _ in range(workers)]
    try:
        return run_workers([_ActorWorker(ray, a) for a in actors], config, plan, model)
    finally:
        for a in actors:
            ray.kill(a)
