"""Orchestration cost of each strategy under a simulated LLM (printed, never asserted).

For every strategy, sync (``query``) and async (``aquery``):

* LLM calls and dependent rounds per query (rounds = groups of overlapping calls);
* median wall time at ``--latency`` seconds per LLM call (default 0.2 s);
* overhead = wall - rounds x latency (what the library adds over the LLM's own time);
* CPU per query at zero latency (process time / queries: the library's own cost);
* 16 concurrent ``aquery`` calls on one instance: wall time and speed-up over 16 x one.

    python benchmarks/bench_strategies.py [--latency 0.2] [--runs 5] [--cpu-runs 200]
    python benchmarks/bench_strategies.py --scifact 300 --model smollm2 [--split train]  # selfrag[local]

``--scifact N`` instead checks retrieval quality: on the first N SciFact test (or
train) queries, nDCG@10 of BM25 (bm25s) with the plain query against HyDE's fused
ranking (``HyDERAG.retrieve_documents``; passages written by the local model); the
fusion keeps the question's own ranking in play and weighs each passage by its
agreement with it, so HyDE should not fall below plain.

The LLM is ``selfrag_core.testing.FakeLLM`` with scripted, grounded replies, the
backend an in-memory ``FakeRetriever``; nothing touches a network or a model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from selfrag_core import ExecutionConfig, HyDERAG, RecursiveRAG, RecursiveRAGConfig, SelfHealingRAG, SelfIRAG
from selfrag_core.testing import FakeLLM, FakeRetriever, first_document

DOCS = [
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Chlorophyll in plant leaves absorbs red and blue light for photosynthesis.",
    "Cellular respiration releases the energy stored in glucose inside mitochondria.",
    "Deforestation removes trees that absorb carbon dioxide from the atmosphere.",
    "Greenhouse gas emissions from fossil fuels are the main cause of climate change.",
    "Rising sea levels and heat waves are effects of climate change.",
]
OFF_TOPIC = ["The museum shows how plants were painted in light colours by early artists."]
SIMPLE_Q = "How do plants turn light energy into chemical energy?"
COMPLEX_Q = (
    "What are the causes and effects of climate change, and how does deforestation compare to emissions?"
)
SUBS = [
    "What are the main causes of climate change?",
    "What are the effects of climate change?",
    "What role does deforestation play in carbon dioxide levels?",
]


def _first_passage(prompt: str) -> str:
    return first_document(prompt, "No context was given.")


def script(prompt: str) -> str:
    """Grounded, well-formed replies for every prompt of the library."""
    if "SUBQUESTIONS:" in prompt:
        return json.dumps({"items": SUBS})
    if "Write a passage" in prompt:
        return (
            "Plants capture light with chlorophyll and convert light energy into chemical energy in glucose."
        )
    if "then judge your own answer" in prompt:
        scores = dict.fromkeys(("relevance", "accuracy", "completeness", "clarity"), 9)
        return json.dumps({"answer": _first_passage(prompt), **scores, "issues": [], "suggestions": []})
    if "factual claims" in prompt:
        supported = "museum" not in prompt
        return json.dumps({"claims": [{"claim": "the answer", "supported": supported}]})
    if "Combine the answers" in prompt:
        return "Emissions cause climate change; its effects include rising seas; deforestation adds CO2."
    return _first_passage(prompt)


Runner = tuple[Callable[[], Any], Callable[[], Any]]  # (sync call, async coroutine factory)


def scenarios(llm: FakeLLM) -> dict[str, Runner]:
    docs = FakeRetriever(list(DOCS))
    off = FakeRetriever(list(OFF_TOPIC))
    self_rag = SelfIRAG(docs, llm)
    hyde = HyDERAG(docs, llm, num_hypothetical_docs=3)
    rec = RecursiveRAG(docs, llm, RecursiveRAGConfig(max_depth=1))
    rec_leaf = RecursiveRAG(docs, llm, RecursiveRAGConfig(max_depth=1), leaf=self_rag)
    heal = SelfHealingRAG(llm, [docs])
    heal_twice = SelfHealingRAG(llm, [off, docs])
    heal_hyde = SelfHealingRAG(llm, [hyde, docs], execution=ExecutionConfig(max_concurrency=4))

    def pair(strategy: Any, query: str) -> Runner:
        return (lambda: strategy.query(query)), (lambda: strategy.aquery(query))

    def heal_pair(strategy: SelfHealingRAG, query: str) -> Runner:
        return (lambda: strategy.ask_sync(query)), (lambda: strategy.ask(query))

    return {
        "SelfIRAG (fast mode, confident)": pair(self_rag, SIMPLE_Q),
        "HyDERAG (N=3)": pair(hyde, SIMPLE_Q),
        "RecursiveRAG (3 sub-questions)": pair(rec, COMPLEX_Q),
        "RecursiveRAG + SelfIRAG leaves": pair(rec_leaf, COMPLEX_Q),
        "SelfHealingRAG (1st attempt ok)": heal_pair(heal, SIMPLE_Q),
        "SelfHealingRAG (heals once)": heal_pair(heal_twice, SIMPLE_Q),
        "SelfHealingRAG over HyDERAG": heal_pair(heal_hyde, SIMPLE_Q),
    }


def measure(name: str, mode: str, latency: float, runs: int, cpu_runs: int) -> dict[str, Any]:
    llm = FakeLLM(script, latency=latency)
    sync_call, async_call = scenarios(llm)[name]
    call = sync_call if mode == "sync" else (lambda: asyncio.run(async_call()))
    call()  # warm-up
    walls, calls, rounds = [], 0, 0
    for _ in range(runs):
        llm.reset()
        start = time.perf_counter()
        call()
        walls.append(time.perf_counter() - start)
        calls, rounds = llm.n_calls, llm.rounds()
    wall = statistics.median(walls)

    fast = FakeLLM(script)
    sync_fast, async_fast = scenarios(fast)[name]
    if mode == "sync":
        cpu0 = time.process_time()
        for _ in range(cpu_runs):
            sync_fast()
    else:

        async def many() -> None:
            for _ in range(cpu_runs):
                await async_fast()

        cpu0 = time.process_time()
        asyncio.run(many())
    cpu_ms = (time.process_time() - cpu0) / cpu_runs * 1000
    return {"calls": calls, "rounds": rounds, "wall": wall, "overhead_ms": (wall - rounds * latency) * 1000,
            "cpu_ms": cpu_ms}  # fmt: skip


def concurrency(name: str, latency: float, n: int = 16) -> tuple[float, float]:
    llm = FakeLLM(script, latency=latency)
    _, async_call = scenarios(llm)[name]

    async def probe() -> tuple[float, float]:
        await async_call()
        start = time.perf_counter()
        await async_call()
        single = time.perf_counter() - start
        start = time.perf_counter()
        await asyncio.gather(*(async_call() for _ in range(n)))
        return time.perf_counter() - start, single

    wall, single = asyncio.run(probe())
    return wall, n * single / wall


def scifact(n_queries: int, model: str, passages: int, split: str = "test") -> None:
    from retrieval_scifact import DEFAULT_DATA, _bm25s, load_scifact, ndcg_at

    from selfrag_core.local.llm import LocalLLM

    corpus, queries, qrels = load_scifact(DEFAULT_DATA, split)
    search, _ = _bm25s(corpus)

    class BM25Backend:
        def retrieve(self, query: str, top_k: int = 10) -> list[dict[str, str]]:
            return [{"id": d, "text": corpus[d]} for d in search(query)[:top_k]]

    llm = LocalLLM(model, max_tokens=96, temperature=0.7 if passages > 1 else 0.0)
    hyde = HyDERAG(BM25Backend(), llm, num_hypothetical_docs=passages, top_k=20, max_final_docs=10)
    plain, fused, start = [], [], time.perf_counter()
    for qid in list(queries)[:n_queries]:
        plain.append(ndcg_at(search(queries[qid]), qrels[qid]))
        fused.append(ndcg_at([d.id or "" for d in hyde.retrieve_documents(queries[qid])], qrels[qid]))
    n = len(plain)
    print(f"SciFact, {n} {split} queries, BM25 top-20 per search, {passages} passage(s) by {llm.name}")
    print(
        f"nDCG@10 plain query {statistics.mean(plain):.4f}   HyDE fused {statistics.mean(fused):.4f}   "
        f"HyDE better/equal/worse on {sum(f > p for f, p in zip(fused, plain, strict=True))}/"
        f"{sum(f == p for f, p in zip(fused, plain, strict=True))}/"
        f"{sum(f < p for f, p in zip(fused, plain, strict=True))} queries; {time.perf_counter() - start:.0f}s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cpu-runs", type=int, default=200)
    parser.add_argument("--scifact", type=int, default=0, metavar="N", help="HyDE nDCG@10 check on N queries")
    parser.add_argument("--model", default="smollm2", help="local model for --scifact")
    parser.add_argument("--passages", type=int, default=1, help="hypothetical passages for --scifact")
    parser.add_argument("--split", default="test", choices=["test", "train"], help="queries for --scifact")
    args = parser.parse_args()
    if args.scifact:
        scifact(args.scifact, args.model, args.passages, args.split)
        return
    names = list(scenarios(FakeLLM(script)))
    print(f"LLM latency {args.latency:.2f}s; median of {args.runs} runs; CPU over {args.cpu_runs} runs")
    header = (
        f"{'strategy':34} {'mode':5} {'calls':>5} {'rounds':>6} {'wall s':>7} {'ovh ms':>7} {'CPU ms/q':>8}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        for mode in ("sync", "async"):
            m = measure(name, mode, args.latency, args.runs, args.cpu_runs)
            print(f"{name:34} {mode:5} {m['calls']:5d} {m['rounds']:6d} {m['wall']:7.3f} "
                  f"{m['overhead_ms']:7.1f} {m['cpu_ms']:8.2f}")  # fmt: skip
    print()
    print(f"{'16 concurrent aquery on one instance':45} {'wall s':>7} {'speed-up vs 16 x one':>21}")
    for name in names:
        wall, speedup = concurrency(name, args.latency)
        print(f"{name:45} {wall:7.3f} {speedup:20.1f}x")


if __name__ == "__main__":
    main()
