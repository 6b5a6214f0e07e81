"""``selfrag eval --ray`` against the local threaded run, on a CPU-bound eval, in one run.

Every configuration answers the same questions with the same contenders over the same
index (the hashing embedder; no cache, so every LLM call is made): the local run on
``--concurrency 1`` and ``2`` threads, and :class:`~selfrag_core.evaluation.ray.RayExecutor`
with 1, 2, ... workers (``--workers``) on a local Ray cluster started once, before any
timing. The configurations run in turn, ``--rounds`` times, so a shared machine's load
falls on each alike; the table gives each one's median wall time (the Ray runs' includes
starting their actors, each building its contenders and loading its model), the speedup
over one local thread, the scaling efficiency (speedup over workers or threads) and the
ratio of the Ray run to the local run with as many threads.

The LLM (``--llm``) decides what is CPU-bound:

* ``native`` (default): each call hashes ``--work`` MB with SHA-256, which releases the
  GIL as a local model's C code does, then answers as ``--llm fake`` does;
* ``python``: each call runs a pure-Python loop of ``--work`` million steps, holding the
  GIL (what LLM-free checks and Python scoring do);
* ``local``: the embedded local model (``--llm local``), ``--threads`` threads in the
  local run, one per Ray worker (the actor's ``num_cpus``). Slow: use few questions.

    python benchmarks/ray_scaling.py                           # 24 questions, native work
    python benchmarks/ray_scaling.py --llm local --questions 6 --rounds 1

Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from selfrag_core.evaluation import EvalSettings, evaluate
from selfrag_core.evaluation.data import load_corpus
from selfrag_core.evaluation.ray import RayExecutor, require_ray
from selfrag_core.evaluation.runner import index_corpus
from selfrag_core.local.factory import fake_llm, make_llm
from selfrag_core.presets import open_index


class BurningLLM:
    """The fake LLM's replies, each after a fixed amount of CPU work (``kind``: "native"
    releases the GIL, "python" holds it)."""

    def __init__(self, kind: str, work: float) -> None:
        self.inner, self.kind, self.work = fake_llm(), kind, work
        self.block = os.urandom(1 << 20)

    def _burn(self) -> None:
        if self.kind == "native":
            digest = hashlib.sha256()
            for _ in range(max(1, round(self.work))):
                digest.update(self.block)  # 1 MB at a time, the GIL released
        else:
            total = 0
            for i in range(int(self.work * 1_000_000)):
                total += i * i
            self.total = total

    def generate(self, prompt: str) -> Any:
        self._burn()
        return self.inner.generate(prompt)

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> Any:
        self._burn()
        return self.inner.generate_structured(prompt, schema)


def make(kind: str, work: float, threads: int | None) -> Any:
    if kind == "local":
        return make_llm("local", **({"n_threads": threads} if threads else {}))
    return BurningLLM(kind, work)


def parts(kind: str, work: float, index: str, threads: int) -> tuple[Any, Any, Any]:
    """A Ray worker's LLM (``threads`` threads: its num_cpus) and index."""
    return make(kind, work, threads), open_index(Path(index), create=False), None


def write_data(folder: Path, n: int) -> tuple[Path, Path]:
    corpus, questions = folder / "corpus.jsonl", folder / "questions.jsonl"
    with corpus.open("w", encoding="utf-8") as f:
        for i in range(n):
            text = f"The animal{i} lives in Place{i}, near the river Nile{i % 5}."
            f.write(json.dumps({"_id": f"d{i}", "title": f"animal{i}", "text": text}) + "\n")
    with questions.open("w", encoding="utf-8") as f:
        for i in range(n):
            line = {"id": f"q{i}", "question": f"Where does the animal{i} live?", "answers": [f"Place{i}"]}
            f.write(json.dumps(line) + "\n")
    return questions, corpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--strategies", default="plain,hyde")
    parser.add_argument("--llm", choices=("native", "python", "local"), default="native")
    parser.add_argument(
        "--work", type=float, default=40.0, help="MB hashed (native) or million steps (python)"
    )
    parser.add_argument("--threads", type=int, default=None, help="the local run's model threads (local)")
    parser.add_argument(
        "--workers", default="1,2", help="the Ray runs: N workers of 1 CPU, or NxT: N workers of T CPUs (1x2)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    ray = require_ray()
    names = [n.strip() for n in args.strategies.split(",") if n.strip()]
    workers = [tuple(int(x) for x in [*w.split("x"), "1"][:2]) for w in args.workers.split(",")]
    cpus = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="selfrag-ray-bench-") as scratch:
        questions, corpus = write_data(Path(scratch), args.questions)
        index = Path(scratch) / "index"
        index_corpus(load_corpus(corpus), index, embed="hashing", save=True)
        started = time.perf_counter()
        path = os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p
        )
        ray.init(
            num_cpus=max(cpus, *(n * t for n, t in workers)), include_dashboard=False, log_to_driver=False,
            object_store_memory=100 * 1024 * 1024, runtime_env={"env_vars": {"PYTHONPATH": path}},
        )  # fmt: skip
        startup = time.perf_counter() - started
        runs: dict[tuple[str, int, int], list[float]] = {}
        answers: dict[tuple[str, int, int], list[Any]] = {}
        configs = [("local", 1, 1), ("local", 2, 1)] + [("ray", n, t) for n, t in workers]
        try:
            for _ in range(args.rounds):
                for kind, n, t in configs:
                    llm = make(args.llm, args.work, args.threads)  # the driver's (the local run's) model
                    executor = None
                    if kind == "ray":
                        recipe = functools.partial(parts, args.llm, args.work, str(index), t)
                        executor = RayExecutor(recipe, workers=n, cpus_per_worker=t)
                    settings = EvalSettings(concurrency=n, embed="hashing")
                    begun = time.perf_counter()
                    report = evaluate(
                        questions, names, llm=llm, index=index, settings=settings, executor=executor
                    )
                    runs.setdefault((kind, n, t), []).append(time.perf_counter() - begun)
                    answers[(kind, n, t)] = [
                        {c: r["answer"] for c, r in (row or {}).items()} for row in report.results
                    ]
        finally:
            ray.shutdown()
    same = all(a == answers[("local", 1, 1)] for a in answers.values())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{args.questions} questions x {len(names)} contenders ({args.strategies}), llm {args.llm} "
        f"(work {args.work:g}), {cpus} CPUs, load average {load:.1f} after; Ray cluster start "
        f"{startup:.1f} s (not counted); median of {args.rounds} round(s); same answers everywhere: {same}"
    )
    base = statistics.median(runs[("local", 1, 1)])
    print(f"{'run':<26} {'wall s':>8} {'speedup':>8} {'efficiency':>11} {'vs local, as many CPUs':>23}")
    for kind, n, t in configs:
        wall = statistics.median(runs[(kind, n, t)])
        label = f"local --concurrency {n}" if kind == "local" else f"ray, {n} worker(s) x {t} CPU"
        local_same = runs.get(("local", n * t, 1))
        ratio = f"{wall / statistics.median(local_same):.2f}" if local_same and kind == "ray" else ""
        print(f"{label:<26} {wall:>8.2f} {base / wall:>8.2f} {base / wall / (n * t):>11.2f} {ratio:>23}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
