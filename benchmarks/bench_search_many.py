"""HyDE's searches in one batch (``RetrieveMany`` / ``RAG.search_many``) against one by one.

HyDE searches with the question and each hypothetical passage. Over the embedded store
those searches are now one ``retrieve_many`` call: one embedder batch for all the query
vectors (``embed_queries``) and one matrix product for their dense scores. This runs
the same HyDE queries, in the same run, over the same ``RAG`` twice: as is (batched),
and behind a wrapper that offers only ``retrieve``/``aretrieve`` (one search per query,
run concurrently, as for any backend without ``retrieve_many``). The LLM is scripted
and instant, so the figures are retrieval and orchestration only. Printed: wall and CPU
time per HyDE query, median of ``--runs`` runs, and the ratio batched / one by one.

    python benchmarks/bench_search_many.py                      # hashing embedder
    python benchmarks/bench_search_many.py --embedder minilm    # needs selfrag[local]

Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

from selfrag_core.store import RAG, HashingEmbeddings
from selfrag_core.strategies.hyde import HyDERAG
from selfrag_core.testing import FakeLLM

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact" / "corpus.jsonl"
QUESTIONS = [
    "Does vitamin D supplementation lower the risk of fractures?",
    "Is obesity associated with type 2 diabetes?",
    "Do statins reduce all-cause mortality?",
    "Can low-dose aspirin prevent colorectal cancer?",
]
PASSAGE = (
    "Cohort studies of older adults report that vitamin D and calcium supplements are "
    "associated with fewer hip fractures, though trials disagree on the size of the effect."
)


class OneByOne:
    """The same store, offering only single searches (no ``retrieve_many``)."""

    def __init__(self, rag: RAG) -> None:
        self.retrieve, self.aretrieve = rag.retrieve, rag.aretrieve


def build(docs: int, embedder: str) -> RAG:
    if embedder == "minilm":
        from selfrag_core.local import LocalEmbeddings

        embed: Any = LocalEmbeddings()
    else:
        embed = HashingEmbeddings()
    with CORPUS.open() as f:
        rows = [json.loads(line) for line in itertools.islice(f, docs)]
    rag = RAG(embed=embed)
    rag.index_many([{"text": f"{r['title']} {r['text']}", "source": r["_id"]} for r in rows])
    return rag


def per_query(hyde: HyDERAG, mode: str, runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds per query over ``runs`` passes of QUESTIONS."""

    async def ask_all() -> None:  # one event loop for the pass, as in a long-lived service
        for question in QUESTIONS:
            assert (await hyde.aquery(question)).sources, "HyDE found nothing"

    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        if mode == "sync":
            for question in QUESTIONS:
                assert hyde.query(question).sources, "HyDE found nothing"
        else:
            asyncio.run(ask_all())
        walls.append((time.perf_counter() - wall) / len(QUESTIONS))
        cpus.append((time.process_time() - cpu) / len(QUESTIONS))
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", choices=("hashing", "minilm"), default="hashing")
    parser.add_argument("--docs", type=int, default=1000, help="SciFact documents indexed")
    parser.add_argument("--passages", type=int, default=3, help="hypothetical passages per query")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rag = build(args.docs, args.embedder)
    llm = FakeLLM({"Write a passage": PASSAGE}, default="A scripted answer.")
    searches = args.passages + 1
    print(
        f"HyDE over {rag.count()} SciFact chunks ({args.embedder} embedder, hybrid), "
        f"{args.passages} passages = {searches} searches per query, instant scripted LLM; "
        f"median of {args.runs} runs of {len(QUESTIONS)} queries\n"
    )
    print(f"{'mode':<6} {'backend':<11} {'wall ms':>8} {'cpu ms':>8}   batched / one by one")
    for mode in ("sync", "async"):
        rows = {}
        for label, backend in (("batched", rag), ("one by one", OneByOne(rag))):
            hyde = HyDERAG(backend, llm, num_hypothetical_docs=args.passages)
            per_query(hyde, mode, 1)  # warm up
            rows[label] = per_query(hyde, mode, args.runs)
        for label, (wall, cpu) in rows.items():
            ratio = ""
            if label == "batched":
                other = rows["one by one"]
                ratio = f"   wall {wall / other[0]:.2f}, cpu {cpu / other[1]:.2f}"
            print(f"{mode:<6} {label:<11} {wall * 1000:8.2f} {cpu * 1000:8.2f}{ratio}")


if __name__ == "__main__":
    main()
