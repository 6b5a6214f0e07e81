"""selfrag's LlamaIndex engines vs LlamaIndex's own, same work, same simulated LLM.

Three pairs, each answering the same queries over the same LlamaIndex retriever
with the same simulated LLM (``../shared/bench/peers/``: ``SimulatedLLM`` behind
its ``CustomLLM`` adapter, 0.2 s per call by default):

* decomposition: LlamaIndex ``SubQuestionQueryEngine`` (``LLMQuestionGenerator``,
  one ``QueryEngineTool``, ``use_async=True``) vs ``RecursiveRAG(max_depth=1,
  max_sub_questions=4)``: 1 decomposition + 4 sub-answers + 1 synthesis, 3 rounds;
* HyDE: ``TransformQueryEngine`` + ``HyDEQueryTransform(include_original=True)`` vs
  ``HyDERAG(num_hypothetical_docs=1)``: 1 passage + 1 answer, 2 rounds;
* retry: ``RetryQueryEngine`` + ``RelevancyEvaluator`` vs ``SelfHealingRAG`` over
  the same backend twice, scored by a YES/NO relevancy judge (the simulated judge
  says NO first, YES second): answer, judge, answer, judge: 4 rounds.

Ours run through ``SelfRAGQueryEngine`` with ``LlamaIndexLLM`` and ``as_backend``.
Each pair runs sync ``query`` and async ``aquery`` one at a time, then N
concurrent ``aquery`` calls (decomposition x32, the others x8; the contenders' runs
interleaved, so that a change in the machine's speed during the measurement favours
none of them). Two retrievers:

* ``index``: the ``VectorStoreIndex`` of the peer harness (LlamaIndex's 1.9 s for x32
  decompositions in the peers' reference run is this one). Its ``SimpleVectorStore``
  scores each stored vector in a Python loop, 3-5 ms of CPU per retrieval, so the 128
  retrievals of 32 decompositions put 0.4-0.7 s of CPU between the rounds, whoever
  orchestrates them;
* ``numpy``: a numpy ``BaseRetriever`` over the same hash embeddings (same rankings,
  ~0.1 ms), which shows the orchestration with retrieval nearly free.

Our backend and LLM adapter call LlamaIndex's public ``retrieve``/``aretrieve`` and
``complete``/``acomplete``, with all of LlamaIndex's instrumentation, as its own engines
do. Beside the x32 decompositions, "by hand" runs the peer harness's hand-written
reference (``example_ours.py``: asyncio.gather and minimal prompts) over the same
LlamaIndex LLM and retriever objects, through the same public calls: the floor those
calls set for any orchestration on top of them. A last row runs the same x32
decompositions with no LlamaIndex object at all (``SimulatedLLM`` and a plain numpy
backend given to ``RecursiveRAG``): the difference is what LlamaIndex's LLM and
retriever wrappers cost. ``ideal = rounds x latency``; ``cpu`` is the process CPU time
of the run, which does not depend on the machine's load the way wall time does.

    python benchmarks/bench_llamaindex.py            # ~5 min on 2 cores
    python benchmarks/bench_llamaindex.py --only decompose --retrievers index,numpy --runs 7
    LLM_LATENCY_S=0.5 python benchmarks/bench_llamaindex.py --runs 2

Printed figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT.parent / "shared" / "bench" / "peers"
sys.path.insert(0, str(PEERS))

import adapters_llamaindex  # noqa: E402
import corpus  # noqa: E402
import example_ours  # noqa: E402
import numpy as np  # noqa: E402
from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.base.response.schema import Response  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402
from sim_llm import SimulatedLLM, default_latency, set_tag  # noqa: E402

from selfrag_core import RecursiveRAGConfig  # noqa: E402
from selfrag_core.strategies import HyDERAG, RecursiveRAG, SelfHealingRAG  # noqa: E402
from selfrag_llamaindex import LlamaIndexLLM, SelfRAGQueryEngine, as_backend  # noqa: E402

SINGLE_Q = corpus.single_queries(10)
COMPARE_Q = corpus.compare_queries(10)
JUDGE_PROMPT = (
    "Is the answer relevant to the question and supported by the context? Reply YES/NO.\n\n"
    "Context:\n{context}\n\nAnswer: {answer}\nQuestion: {question}\nVerdict:"
)


class NumpyRetriever(BaseRetriever):
    """Top-k by one matrix product over the peers' hash embeddings (same ranking as the index)."""

    def __init__(self, top_k: int = corpus.TOP_K) -> None:
        self.similarity_top_k = top_k
        self._matrix = np.array([corpus.hash_embed(d["text"]) for d in corpus.CORPUS])
        self._nodes = [TextNode(text=d["text"], id_=d["id"]) for d in corpus.CORPUS]
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        scores = self._matrix @ np.array(corpus.hash_embed(query_bundle.query_str))
        best = np.argsort(-scores, kind="stable")[: self.similarity_top_k]
        return [NodeWithScore(node=self._nodes[i], score=float(scores[i])) for i in best]


class PlainBackend:
    """The same numpy ranking as a framework-free selfrag backend (for the core-alone floor)."""

    score_kind = "similarity"

    def __init__(self) -> None:
        self._numpy = NumpyRetriever()

    def retrieve(self, query: str, top_k: int) -> list[dict[str, Any]]:
        self._numpy.similarity_top_k = top_k
        hits = self._numpy._retrieve(QueryBundle(query))
        return [{"id": h.node.node_id, "text": h.node.get_content(), "score": h.score} for h in hits]


class HandWritten:
    """The peer harness's hand-written decomposition (``example_ours.py``: its prompts,
    ``asyncio.gather``, no framework) over the same LlamaIndex LLM and retriever objects:
    the floor that those objects and the simulated LLM set for x32 decompositions."""

    def __init__(self, llm: Any, retriever: Any) -> None:
        self.llm, self.retriever = llm, retriever

    async def aquery(self, question: str) -> Any:
        reply = await self.llm.acomplete(example_ours._subq_prompt(question))

        async def sub(sub_question: str) -> str:
            nodes = await self.retriever.aretrieve(sub_question)
            context = [n.node.get_content() for n in nodes]
            answer = await self.llm.acomplete(example_ours._answer_prompt(sub_question, context))
            return f"Sub question: {sub_question}\nResponse: {answer.text}"

        notes = await asyncio.gather(*(sub(s) for s in example_ours._parse_subq(reply.text)))
        final = await self.llm.acomplete(example_ours._answer_prompt(question, list(notes)))
        return Response(final.text)


class YesNoRelevancy:
    """A selfrag metric: the LLM judges the answer YES (1.0) or NO (0.0), like RelevancyEvaluator."""

    def __init__(self, llm: LlamaIndexLLM) -> None:
        self.llm = llm

    def _prompt(self, question: str, answer: str, contexts: list[str]) -> str:
        return JUDGE_PROMPT.format(context="\n\n".join(contexts), answer=answer, question=question)

    def score(self, question: str, answer: str, contexts: list[str]) -> float:
        return float("YES" in self.llm.generate(self._prompt(question, answer, contexts)).text.upper())

    async def ascore(self, question: str, answer: str, contexts: list[str]) -> float:
        reply = await self.llm.agenerate(self._prompt(question, answer, contexts))
        return float("YES" in reply.text.upper())


# ----------------------------------------------------------------------------- engines


def peer_engines(llm: Any, retriever: BaseRetriever) -> dict[str, Any]:
    """LlamaIndex's own engines, set up as in the peer harness (scenarios.py)."""
    from llama_index.core.evaluation import RelevancyEvaluator
    from llama_index.core.indices.query.query_transform import HyDEQueryTransform
    from llama_index.core.query_engine import (
        RetrieverQueryEngine,
        RetryQueryEngine,
        SubQuestionQueryEngine,
        TransformQueryEngine,
    )
    from llama_index.core.question_gen import LLMQuestionGenerator
    from llama_index.core.response_synthesizers import get_response_synthesizer
    from llama_index.core.tools import QueryEngineTool

    def plain() -> RetrieverQueryEngine:
        return RetrieverQueryEngine.from_args(retriever, llm=llm)

    tool = QueryEngineTool.from_defaults(
        query_engine=plain(), name="corpus", description="Encyclopedia of 200 invented places and customs."
    )
    return {
        "decompose": SubQuestionQueryEngine.from_defaults(
            query_engine_tools=[tool],
            llm=llm,
            question_gen=LLMQuestionGenerator.from_defaults(llm=llm),
            response_synthesizer=get_response_synthesizer(llm=llm, use_async=True),
            use_async=True,
            verbose=False,
        ),
        "hyde": TransformQueryEngine(
            plain(), query_transform=HyDEQueryTransform(llm=llm, include_original=True)
        ),
        "retry": RetryQueryEngine(plain(), RelevancyEvaluator(llm=llm), max_retries=3),
    }


def our_engines(llm: Any, retriever: Any) -> dict[str, SelfRAGQueryEngine]:
    backend, ours = as_backend(retriever), LlamaIndexLLM(llm)
    k = corpus.TOP_K
    strategies = {
        "decompose": RecursiveRAG(
            backend, ours, RecursiveRAGConfig(max_depth=1, max_sub_questions=4, top_k=k)
        ),
        "hyde": HyDERAG(backend, ours, num_hypothetical_docs=1, top_k=k, max_final_docs=k),
        "retry": SelfHealingRAG(
            ours,
            [backend, backend],
            max_retries=1,
            quality_threshold=0.5,
            retrieval_top_k=k,
            metric=YesNoRelevancy(ours),
        ),
    }
    return {name: SelfRAGQueryEngine(strategy=s) for name, s in strategies.items()}


# ----------------------------------------------------------------------------- measuring

QUERIES = {"decompose": COMPARE_Q, "hyde": SINGLE_Q, "retry": SINGLE_Q}
CONCURRENCY = {"decompose": 32, "hyde": 8, "retry": 8}


def _warm(sim: SimulatedLLM, fn: Callable[[], Any]) -> None:
    latency, sim.latency_s = sim.latency_s, 0.0
    sim.reset()
    fn()
    sim.latency_s = latency


async def _checked(answers: Awaitable[Any]) -> None:
    """Await ``answers`` (one response or a list), check each has text, return nothing:
    asyncio.run (Python 3.11) formats the repr of the task it ran, result included, when it
    puts back the SIGINT handler, so returning 32 responses would time their repr()."""
    got = await answers
    for response in got if isinstance(got, list) else [got]:
        text = response.response if hasattr(response, "response") else response.answer  # engine / core
        if not isinstance(text, str) or not text.strip():
            raise AssertionError(f"{type(response).__name__} without an answer")


#: a full garbage collection before each timed run (``--no-collect`` turns it off)
COLLECT = True


def _fresh(sim: SimulatedLLM) -> None:
    """Before a timed run: an empty call log and, unless ``--no-collect``, a full garbage
    collection, so that no run pays for the garbage of the one before. Without it, the
    first run after LlamaIndex's own engine (which leaves about twice our garbage) often
    takes the full collection that this garbage brings on: over the ~190,000 objects
    that importing LlamaIndex leaves, about 140 ms, whoever happens to trigger it."""
    sim.reset()
    if COLLECT:
        gc.collect()


def sequential(sim: SimulatedLLM, engine: Any, queries: list[str], mode: str, runs: int) -> dict[str, Any]:
    def once(i: int) -> Any:
        if mode == "sync":
            return engine.query(queries[i % len(queries)])
        return asyncio.run(_checked(engine.aquery(queries[i % len(queries)])))

    _warm(sim, lambda: once(0))
    walls, cpus, calls, rounds = [], [], set(), set()
    for r in range(runs):
        _fresh(sim)
        start, cpu = time.perf_counter(), time.process_time()
        once(r)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        calls.add(sim.n_calls)
        rounds.add(sim.rounds())
    return {**_record(walls, cpus, calls, rounds), "kinds": sim.kinds()}


def concurrent(
    sim: SimulatedLLM, engines: dict[str, Any], queries: list[str], n: int, runs: int
) -> dict[str, dict[str, Any]]:
    """``n`` concurrent ``aquery`` calls per run for each engine, the engines' runs
    interleaved (run 1 of each, then run 2 of each, ...): a machine that speeds up or
    slows down during the measurement, or a process that grows, favours none of them."""

    def batch(engine: Any) -> Callable[[], None]:
        async def one(i: int) -> Any:
            set_tag(i)
            return await engine.aquery(queries[i % len(queries)])

        async def run() -> None:
            await _checked(asyncio.gather(*(one(i) for i in range(n))))

        return lambda: asyncio.run(run())

    batches = {label: batch(engine) for label, engine in engines.items()}
    for fn in batches.values():
        _warm(sim, fn)
    seen: dict[str, tuple[list[float], list[float], set[int], set[Any]]] = {
        label: ([], [], set(), set()) for label in engines
    }
    for _ in range(runs):
        for label, fn in batches.items():
            walls, cpus, calls, per_query = seen[label]
            _fresh(sim)
            start, cpu = time.perf_counter(), time.process_time()
            fn()
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
            calls.add(sim.n_calls)
            per_query.add(statistics.median(sim.rounds_by_tag().values()))
    return {label: _record(*seen[label]) for label in engines}


def _record(walls: list[float], cpus: list[float], calls: set[int], rounds: set[Any]) -> dict[str, Any]:
    one = {
        name: next(iter(v)) if len(v) == 1 else sorted(v)
        for name, v in (("calls", calls), ("rounds", rounds))
    }
    return {
        "wall": statistics.median(walls), "spread": (min(walls), max(walls)),
        "cpu": statistics.median(cpus), **one,
    }  # fmt: skip


def _ideal(rec: dict[str, Any], latency: float) -> float | None:
    return rec["rounds"] * latency if isinstance(rec["rounds"], (int, float)) else None


def _fmt(rec: dict[str, Any], latency: float) -> str:
    ideal = _ideal(rec, latency)
    vs_ideal = f"{rec['wall'] / ideal:5.2f}x" if ideal else "   - "
    low, high = rec["spread"]
    return (
        f"{rec['wall']:7.3f} s ({low:.3f}-{high:.3f}) {rec['cpu'] * 1000:6.0f} ms cpu "
        f"{rec['calls']!s:>4} calls {rec['rounds']!s:>4} rounds {vs_ideal} ideal"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (the median is shown)")
    parser.add_argument("--only", default="decompose,hyde,retry")
    parser.add_argument("--retrievers", default="index,numpy")
    parser.add_argument("--no-collect", action="store_true", help="no gc.collect() before each timed run")
    args = parser.parse_args()
    global COLLECT
    COLLECT = not args.no_collect
    sim = SimulatedLLM(latency_s=default_latency())
    shared = adapters_llamaindex.setup(sim)  # also sets Settings.llm for LlamaIndex's own engines
    llm, latency = shared["llm"], sim.latency_s
    index = shared["index"].as_retriever(similarity_top_k=corpus.TOP_K)
    retrievers = {"index": index, "numpy": NumpyRetriever()}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"simulated LLM latency {latency:.2f} s, {args.runs} runs per figure: median (fastest-slowest); "
        f"load average {load}"
    )
    collect = "a full gc.collect() before each timed run" if COLLECT else "no gc.collect() between runs"
    print(f"cpu = process CPU time of the run (all queries of a concurrent batch); {collect}\n")
    for rname in args.retrievers.split(","):
        retriever = retrievers[rname]
        peers, ours = peer_engines(llm, retriever), our_engines(llm, retriever)
        print(f"== retriever: {rname} ({type(retriever).__name__})")
        for name in args.only.split(","):
            queries = QUERIES[name]
            rows = []
            for mode in ("sync", "async"):
                peer = sequential(sim, peers[name], queries, mode, args.runs)
                mine = sequential(sim, ours[name], queries, mode, args.runs)
                rows.append((f"{name} {mode}", peer, mine))
            print(f"  {name}: calls by kind: llamaindex {rows[0][1]['kinds']}, selfrag {rows[0][2]['kinds']}")
            n = CONCURRENCY[name]
            engines = {"llamaindex": peers[name], "selfrag": ours[name]}
            if name == "decompose":  # the same LLM, and the retriever our backend queries
                same = as_backend(retriever).retriever_for(corpus.TOP_K)
                engines["by hand"] = HandWritten(llm, same)
            found = concurrent(sim, engines, queries, n, args.runs)
            rows.append((f"{name} aquery x{n}", found["llamaindex"], found["selfrag"]))
            for label, peer, mine in rows:
                ratio = mine["wall"] / peer["wall"]
                print(f"  {label:<20} llamaindex {_fmt(peer, latency)}")
                print(f"  {'':<20} selfrag    {_fmt(mine, latency)}   selfrag/llamaindex {ratio:.2f}")
            if "by hand" in found:
                hand = found["by hand"]
                over = found["selfrag"]["wall"] / hand["wall"]
                note = f"selfrag/by hand {over:.2f} (same LLM and retriever objects, no framework)"
                print(f"  {'':<20} by hand    {_fmt(hand, latency)}   {note}")
        print()
    floor(sim, latency, args.runs)


def floor(sim: SimulatedLLM, latency: float, runs: int) -> None:
    """RecursiveRAG with no LlamaIndex object at all (SimulatedLLM and a plain numpy
    backend): what the LlamaIndex LLM and retriever wrappers add to x32 decompositions."""
    strategy = RecursiveRAG(PlainBackend(), sim, RecursiveRAGConfig(max_depth=1, max_sub_questions=4))
    rec = concurrent(sim, {"core": strategy}, COMPARE_Q, CONCURRENCY["decompose"], runs)["core"]
    print("== selfrag core alone (SimulatedLLM + plain numpy backend, no LlamaIndex objects)")
    print(f"  {'decompose aquery x32':<20} selfrag    {_fmt(rec, latency)}")


if __name__ == "__main__":
    main()
