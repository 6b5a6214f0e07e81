"""An evaluation's questions answered by Ray actors: :class:`RayExecutor`.

Each actor builds the contenders once (``parts()`` gives it its own LLM, backend and
judge; :func:`~selfrag_core.evaluation.runner.prepare` sizes them from the run's
settings) and answers one question at a time. Its LLM calls are recorded in a cache file
of its own, seeded with the driver's recorded replies (so ``--replay`` and
``--shared-replies`` answer as they do locally); with each question it sends back the
replies it recorded meanwhile, which the driver alone writes into the run's cache file.
No SQLite file is shared across machines.

A question whose actor died is queued again (Ray restarts the actor, which builds its
contenders anew); the driver records each question once, as it finishes. Ray is imported
when the executor runs, never with this module: without it, :func:`require_ray` names
the extra (``pip install 'selfrag[ray]'``).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from selfrag_core.errors import ConfigurationError
from selfrag_core.evaluation.data import EvalQuestion
from selfrag_core.evaluation.runner import Finished, WorkerJob, answer, prepare

__all__ = ["RAY_EXTRA", "QuestionWorker", "RayExecutor", "require_ray"]

#: what installs Ray for selfrag
RAY_EXTRA = "pip install 'selfrag[ray]'"
#: LLM, backend and judge of one worker, built in the worker (a picklable callable)
Parts = Callable[[], tuple[Any, Any, Any]]
#: how often a question is queued again after its worker died, before the run stops
MAX_ATTEMPTS = 4


def require_ray() -> Any:
    """The ``ray`` module, or a ConfigurationError naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise ConfigurationError(f"--ray needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


class QuestionWorker:
    """What one Ray actor holds: the contenders, built once from ``parts()``, and a cache
    file of its own seeded with the driver's ``replies``."""

    def __init__(self, job: WorkerJob, parts: Parts, replies: list[tuple[Any, ...]]) -> None:
        llm, rag, judge = parts()
        self._job = job
        self._scratch = tempfile.TemporaryDirectory(prefix="selfrag-ray-worker-") if job.records else None
        store = None if self._scratch is None else Path(self._scratch.name) / "replies.sqlite"
        self._prepared = prepare(job.contenders, llm, rag, judge if job.judged else None, job.settings, store)
        self._seen = 0  # the last row of the file sent (or seeded)
        if replies:
            handle = next(iter([*self._prepared.cached.values(), self._prepared.judged]), None)
            if handle is not None:
                handle.add_recorded(replies)
                self._seen = self._prepared.recorded_after(0)[1]

    def answer(self, index: int, question: EvalQuestion) -> Finished:
        """Every contender on ``question``: its records, the replies recorded meanwhile and
        the cache counters' increments."""
        before = {name: counts for name, *counts in self._prepared.counts()}
        results = answer(self._prepared, question, self._job.ranking, self._job.settings.k)
        rows, self._seen = self._prepared.recorded_after(self._seen)
        counts = [
            (name, hits - before[name][0], misses - before[name][1], borrowed - before[name][2])
            for name, hits, misses, borrowed in self._prepared.counts()
        ]
        return Finished(index, results, rows, counts)

    def pid(self) -> int:
        return os.getpid()


class RayExecutor:
    """Answers an evaluation's questions on Ray actors (see the module docstring).

    ``parts``: a picklable callable that builds, in a worker, its ``(llm, backend,
    judge)`` (the judge is used when the run has one). ``address``: the cluster to join
    (``"auto"``, ``"ray://HOST:10001"``, ...); None starts a local one, stopped after the
    run (a Ray already initialised in this process is used as it is). ``workers``: the
    actors (default: the cluster's CPUs over ``cpus_per_worker``); ``cpus_per_worker``:
    each actor's ``num_cpus``, which should be its local model's threads. ``in_flight``:
    questions queued per actor (2: the next is there when one finishes). ``init``:
    further ``ray.init`` keywords for a local cluster.
    """

    def __init__(
        self,
        parts: Parts,
        *,
        address: str | None = None,
        workers: int | None = None,
        cpus_per_worker: int = 1,
        in_flight: int = 2,
        init: dict[str, Any] | None = None,
    ) -> None:
        if workers is not None and workers < 1:
            raise ConfigurationError(f"Ray workers must be 1 or more, got {workers}")
        if cpus_per_worker < 1:
            raise ConfigurationError(f"CPUs per Ray worker must be 1 or more, got {cpus_per_worker}")
        self.parts, self.address, self.workers = parts, address, workers
        self.cpus_per_worker, self.in_flight, self.init = cpus_per_worker, max(1, in_flight), init or {}
        self.restarts = 0  # questions queued again after their worker died, in the last run
        self.startup_s = 0.0  # the last run's wait for its actors to build their contenders

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "ray",
            "address": self.address,
            "workers": self.workers,
            "cpus_per_worker": self.cpus_per_worker,
        }

    def run(
        self,
        job: WorkerJob,
        questions: Sequence[EvalQuestion],
        replies: list[tuple[Any, ...]],
        finished: Callable[[Finished], None],
    ) -> None:
        ray = require_ray()
        started = not ray.is_initialized()
        if started:
            options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
            ray.init(address=self.address, **{**options, **self.init})
        actors: list[Any] = []
        try:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            count = self.workers or max(1, cpus // self.cpus_per_worker)
            self.workers = count
            worker = ray.remote(num_cpus=self.cpus_per_worker, max_restarts=-1, max_task_retries=0)(
                QuestionWorker
            )
            shared = ray.put(replies)
            actors = [worker.remote(job, self.parts, shared) for _ in range(min(count, len(questions)))]
            begun = time.perf_counter()
            ray.get([actor.pid.remote() for actor in actors])  # each built its contenders
            self.startup_s = time.perf_counter() - begun
            self._dispatch(ray, actors, questions, finished)
        finally:
            for actor in actors:
                ray.kill(actor, no_restart=True)
            if started:
                ray.shutdown()

    def _dispatch(
        self,
        ray: Any,
        actors: list[Any],
        questions: Sequence[EvalQuestion],
        finished: Callable[[Finished], None],
    ) -> None:
        """Each question to an actor with room, queued again when its actor died."""
        from ray.exceptions import RayActorError

        waiting = deque(range(len(questions)))
        attempts = [0] * len(questions)
        flying: dict[Any, tuple[int, int]] = {}  # the answer's reference: (question, actor)
        load = [0] * len(actors)
        self.restarts = 0
        while waiting or flying:
            for a, actor in enumerate(actors):
                while waiting and load[a] < self.in_flight:
                    i = waiting.popleft()
                    attempts[i] += 1
                    flying[actor.answer.remote(i, questions[i])] = (i, a)
                    load[a] += 1
            (ready, *_), _ = ray.wait(list(flying), num_returns=1)
            i, a = flying.pop(ready)
            load[a] -= 1
            try:
                one = ray.get(ready)
            except RayActorError as e:  # the worker died: another (or it, restarted) answers
                if attempts[i] >= MAX_ATTEMPTS:
                    raise ConfigurationError(
                        f"question {questions[i].id} lost its Ray worker {attempts[i]} times; the last: {e}"
                    ) from e
                self.restarts += 1
                waiting.appendleft(i)
                continue
            finished(one)
