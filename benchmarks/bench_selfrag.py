"""SelfIRAG engine overhead: wall time per iteration against the LLM's own time, and
CPU per query at zero latency. Prints figures; asserts nothing.

    python benchmarks/bench_selfrag.py [--latency 0.2] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from selfrag_core import ExecutionConfig, SelfIRAG, SelfRAGConfig
from selfrag_core.testing import FakeLLM, FakeRetriever, judge_json

DOCS = [f"Document {i} describes topic {i} with facts about item {i} and its history." for i in range(200)]


def reply(prompt: str) -> str:
    if "Improve the answer" in prompt:
        return "Topic 7 has facts about item 7 and its history."
    if "then judge" in prompt:
        return judge_json("Topic 7 has facts about item 7.", 6, suggestions=["history", "facts"])
    return judge_json(None, 6)  # below threshold: every iteration runs


def build(latency: float, fast_mode: bool) -> tuple[SelfIRAG, FakeLLM]:
    llm = FakeLLM(reply, latency=latency)
    cfg = SelfRAGConfig(max_refinement_iterations=3, fast_mode=fast_mode)
    return SelfIRAG(FakeRetriever(list(DOCS)), llm, cfg, execution=ExecutionConfig()), llm


def per_iteration(latency: float, fast_mode: bool, mode: str, runs: int = 5) -> None:
    rag, llm = build(latency, fast_mode)
    walls, overheads = [], []
    for _ in range(runs):
        llm.reset()
        start = time.perf_counter()
        question = "What is topic 7?"
        result = rag.query(question) if mode == "sync" else asyncio.run(rag.aquery(question))
        wall = time.perf_counter() - start
        llm_time = sum(c.end - c.start for c in llm.calls)
        walls.append(wall / result.iterations)
        overheads.append((wall - llm_time) / result.iterations * 1000)
    print(
        f"  {mode:5s} fast_mode={fast_mode!s:5s} iterations={result.iterations} llm_calls={llm.n_calls} "
        f"rounds={llm.rounds()}  wall/iter={statistics.median(walls) * 1000:7.1f} ms  "
        f"overhead/iter={statistics.median(overheads):5.2f} ms (target < 5 ms)"
    )


def cpu_per_query(queries: int, fast_mode: bool) -> None:
    rag, _ = build(0.0, fast_mode)
    rag.query("warm up")
    start_cpu, start = time.process_time(), time.perf_counter()
    for i in range(queries):
        rag.query(f"What is topic {i % 200}?")
    cpu = (time.process_time() - start_cpu) / queries * 1000
    wall = (time.perf_counter() - start) / queries * 1000
    print(f"  fast_mode={fast_mode!s:5s} 3 iterations: CPU {cpu:.2f} ms/query, wall {wall:.2f} ms/query")


async def concurrent(latency: float, n: int) -> None:
    rag, _ = build(latency, True)
    start = time.perf_counter()
    await asyncio.gather(*(rag.aquery(f"What is topic {i}?") for i in range(n)))
    wall = time.perf_counter() - start
    ideal = 5 * latency  # 5 dependent LLM rounds per query (fast mode, 3 iterations)
    print(f"  {n} concurrent aquery: {wall:.3f} s, ideal {ideal:.3f} s, ratio {wall / ideal:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    print(f"SelfIRAG at {args.latency}s simulated LLM latency (median of 5 queries)")
    for mode in ("sync", "async"):
        for fast in (True, False):
            per_iteration(args.latency, fast, mode)
    print("CPU per query at zero latency")
    for fast in (True, False):
        cpu_per_query(args.queries, fast)
    print("Concurrency")
    asyncio.run(concurrent(args.latency, 32))


if __name__ == "__main__":
    main()
