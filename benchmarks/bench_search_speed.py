"""The embedded store's search against the libraries it stands beside, in one process.

Every system answers the same queries one at a time (top 10), interleaved query by
query (ours, then the other, in turn) so that a change in the machine's load falls on
both alike; p50 / p95 over ``--rounds`` passes (the first pass included: a term's scores
are computed at its first query), by wall time or, with ``--cpu-time``, the process's CPU
time (on a machine other jobs keep busy: the time the process waits for a core left out).
Timed:

* **lexical**: ``RAG().search(q, top_k=10)`` (tokenising, scoring, ranking and the hits),
  against ``bm25s`` as its README shows it (``bm25s.tokenize`` with English stopwords
  and the PyStemmer stemmer, then ``retrieve``), the same text in, the same 10 ids out;
* **dense, exact**: ``RAG(embed, bm25_alpha=1).search(q, top_k=10)`` against
  ``faiss.IndexFlatIP.search`` over the same unit vectors; the query vectors are
  computed beforehand (the embedder is a lookup), so both time the search alone.

On BEIR SciFact (``--scifact``: 5,183 abstracts, 300 test queries; the vectors are
``HashingEmbeddings(384)``'s, MiniLM's dimension), with nDCG@10 of ours and bm25s. With
``--docs N``, also at N chunks: the synthetic corpus of ``bench_scale.py`` (60-word Zipf
documents, its 200 queries) indexed by ours and by bm25s, ours saved and opened again
(``RAG.load``, memory-mapped) and both of ours searched; and N random unit vectors
(dim 384, seeded) scanned exactly by ours (the approximate index switched off) and by
faiss flat, with 100 random queries.

With ``--floor``, also the least a Python search returning hits can do with our scan
(:func:`least_search`), timed beside faiss flat in a pair of its own: what ours could reach
with nothing but the scan, the top 10 and ten hits around it.

With ``--rankings FILE``, every SciFact test query's top 10 in lexical, hybrid and dense
mode (ids and every score, to the bit) is written to FILE when it does not exist, else
compared with it: record before a change to the search path, compare after
(``--rankings-embedder minilm``: with MiniLM's vectors, which need ``selfrag[local]``).

    python benchmarks/bench_search_speed.py                    # SciFact
    python benchmarks/bench_search_speed.py --docs 1000000     # and 1M chunks
    python benchmarks/bench_search_speed.py --floor            # and the floor under ours
    python benchmarks/bench_search_speed.py --rankings /tmp/before.json

Needs the ``store`` and ``ann`` extras (bm25s, PyStemmer, faiss-cpu). Nothing is
asserted; the figures are printed (and written to ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale
from retrieval_scifact import DEFAULT_DATA, CachedEmbeddings, load_scifact, make_embedder, ndcg_at

from selfrag_core.store import RAG, HashingEmbeddings, ann
from selfrag_core.store.dense import as_matrix, dot_scores
from selfrag_core.store.search import SearchHit, _best
from selfrag_core.types import ScoreKind
from selfrag_core.validation import validate_query

TOP_K = 10
DIM = 384


class Lookup:
    """An embedder whose vectors were computed beforehand: text -> its row."""

    name = "lookup"

    def __init__(self, rows: dict[str, np.ndarray]) -> None:
        self.rows = rows

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.rows[t] for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self.rows[text]


#: what :func:`timed` reads: wall time, or (``--cpu-time``) the process's CPU time, all its
#: threads counted, which leaves out the time a busy machine keeps the process waiting
CLOCK = time.perf_counter


def timed(systems: dict[str, Callable[[Any], Any]], inputs: Sequence[Any], rounds: int) -> dict[str, Any]:
    """p50 / p95 (ms) of each system over ``rounds`` passes, interleaved input by input."""
    times: dict[str, list[float]] = {name: [] for name in systems}
    order = list(systems.items())
    for r in range(rounds):
        for i, x in enumerate(inputs):
            for name, fn in order[(r + i) % len(order) :] + order[: (r + i) % len(order)]:
                start = CLOCK()
                fn(x)
                times[name].append(CLOCK() - start)
    out = {}
    for name, ts in times.items():
        cuts = statistics.quantiles(ts, n=20)
        out[name] = {"p50_ms": statistics.median(ts) * 1e3, "p95_ms": cuts[18] * 1e3}
    return out


def bm25s_search(texts: list[str]) -> Callable[[str], list[int]]:
    """bm25s over ``texts``, as its README indexes and queries."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    corpus_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever.index(corpus_tokens, show_progress=False)

    def search(query: str) -> list[int]:
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False)
        docs, _ = retriever.retrieve(tokens, k=TOP_K, show_progress=False)
        return [int(d) for d in docs[0]]

    return search


def faiss_search(vectors: np.ndarray) -> Callable[[np.ndarray], Any]:
    import faiss

    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    return lambda qvec: flat.search(qvec[None, :], TOP_K)[1][0]


def dense_rag(vectors: np.ndarray, texts: list[str], queries: dict[str, np.ndarray]) -> RAG:
    embed = Lookup({**dict(zip(texts, vectors, strict=True)), **queries})
    rag = RAG(embed, bm25_alpha=1.0, chunk_size=20_000, chunk_overlap=0)
    rag.index_many([{"text": t, "source": str(i)} for i, t in enumerate(texts)])
    return rag


def least_search(rag: RAG) -> Callable[[str], list[SearchHit]]:
    """The least a Python search returning hits can do with the store's own scan: the query
    checked, its vector looked up and normalised, the scan (``dot_scores``), the top 10, ten
    hits (no filters, no lock, no hybrid scores): the floor under ``RAG.search``."""
    index = rag._index
    matrix = index.vectors()

    def search(query: str) -> list[SearchHit]:
        qvec = as_matrix(index.embedder.embed_query(validate_query(query)), 1)
        scores = dot_scores(matrix, qvec)[:, 0]
        best = _best(scores, TOP_K)
        chunks = index.chunks.at(best.tolist())
        return [
            SearchHit(c.text, s, dict(c.metadata), c.id, ScoreKind.SIMILARITY, source=c.source, dense_score=s)
            for c, s in zip(chunks, scores[best].tolist(), strict=True)
        ]

    return search


def ratio(figures: dict[str, Any], ours: str, theirs: str) -> dict[str, float]:
    return {q: figures[ours][q] / figures[theirs][q] for q in ("p50_ms", "p95_ms")}


def scifact(root: Path, rounds: int, floor: bool = False) -> dict[str, Any]:
    corpus, queries, qrels = load_scifact(root)
    ids, texts = list(corpus), list(corpus.values())
    rag = RAG(chunk_size=20_000, chunk_overlap=0)
    rag.index_many([{"text": t, "source": d} for d, t in corpus.items()])
    rag.search("warm up: builds the BM25 statistics")
    theirs = bm25s_search(texts)
    quality = {
        "ours": statistics.fmean(
            ndcg_at([h.source for h in rag.search(q, top_k=TOP_K)], qrels[qid]) for qid, q in queries.items()
        ),
        "bm25s": statistics.fmean(
            ndcg_at([ids[i] for i in theirs(q)], qrels[qid]) for qid, q in queries.items()
        ),
    }
    rag = RAG(chunk_size=20_000, chunk_overlap=0)  # again: the first pass pays the terms' scores
    rag.index_many([{"text": t, "source": d} for d, t in corpus.items()])
    rag.search("warm up: builds the BM25 statistics")
    qtexts = list(queries.values())
    lexical = timed({"ours": lambda q: rag.search(q, top_k=TOP_K), "bm25s": theirs}, qtexts, rounds)

    embedder = HashingEmbeddings(DIM)
    vectors = embedder.embed_documents(texts)
    qvecs = embedder.embed_queries(qtexts)
    drag = dense_rag(vectors, texts, dict(zip(qtexts, qvecs, strict=True)))
    flat = faiss_search(vectors)
    agree = statistics.fmean(
        len({int(h.source) for h in drag.search(q, top_k=TOP_K)} & set(flat(v).tolist())) / TOP_K
        for q, v in zip(qtexts, qvecs, strict=True)
    )
    dense = timed(
        {"ours": lambda i: drag.search(qtexts[i], top_k=TOP_K), "faiss flat": lambda i: flat(qvecs[i])},
        range(len(qtexts)),
        rounds,
    )
    figures = {
        "ndcg10": quality, "lexical": lexical, "lexical_ratio": ratio(lexical, "ours", "bm25s"),
        "dense": dense, "dense_ratio": ratio(dense, "ours", "faiss flat"), "dense_top10_agreement": agree,
    }  # fmt: skip
    if floor:  # a pair of its own, so that it alternates with faiss as ours did
        least = least_search(drag)
        figures["dense_floor"] = timed(
            {"least": lambda i: least(qtexts[i]), "faiss flat": lambda i: flat(qvecs[i])},
            range(len(qtexts)),
            rounds,
        )
        figures["dense_floor_ratio"] = ratio(figures["dense_floor"], "least", "faiss flat")
    return figures


def rankings(root: Path, kind: str) -> dict[str, dict[str, list[list[Any]]]]:
    """Every SciFact test query's top 10 in lexical, hybrid and dense mode: (chunk id,
    score, lexical score, dense score) a hit, the scores as ``repr`` (every bit); the
    vectors ``HashingEmbeddings(384)``'s or (``kind`` "minilm") MiniLM's, its document
    vectors cached as ``retrieval_scifact.py`` caches them."""
    corpus, queries, _ = load_scifact(root)
    docs = [{"text": t, "source": d} for d, t in corpus.items()]
    embedder: Any = HashingEmbeddings(DIM)
    if kind == "minilm":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        embedder = CachedEmbeddings(make_embedder("minilm"), list(corpus.values()))
    out: dict[str, dict[str, list[list[Any]]]] = {}
    for mode, rag in (
        ("lexical", RAG(chunk_size=20_000, chunk_overlap=0)),
        ("hybrid", RAG(embedder, chunk_size=20_000, chunk_overlap=0)),
        ("dense", RAG(embedder, bm25_alpha=1.0, chunk_size=20_000, chunk_overlap=0)),
    ):
        rag.index_many(docs)
        out[mode] = {
            qid: [
                [h.id, repr(h.score), repr(h.lexical_score), repr(h.dense_score)]
                for h in rag.search(q, top_k=TOP_K)
            ]
            for qid, q in queries.items()
        }
    return out


def check_rankings(root: Path, path: Path, kind: str) -> str:
    """Record :func:`rankings` to ``path`` when it does not exist, else compare with it."""
    found = rankings(root, kind)
    if not path.exists():
        path.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
        return f"rankings recorded to {path}"
    recorded = json.loads(path.read_text(encoding="utf-8"))
    differ = {m: [q for q in found[m] if found[m][q] != recorded[m].get(q)] for m in found}
    if not any(differ.values()):
        return f"rankings: all {len(found['dense'])} queries the same as {path} in every mode"
    return "rankings DIFFER: " + ", ".join(
        f"{m}: {len(qs)} queries ({qs[:3]})" for m, qs in differ.items() if qs
    )


def scale_lexical(docs: int, rounds: int, where: Path) -> dict[str, Any]:
    documents = bench_scale.corpus(docs)
    qtexts = bench_scale.queries()
    start = time.perf_counter()
    built = RAG()
    built.index_many(documents)
    built.search("warm up")
    index_s = time.perf_counter() - start
    start = time.perf_counter()
    theirs = bm25s_search([d["text"] for d in documents])
    bm25s_index_s = time.perf_counter() - start
    del documents
    built.save(where / "index")
    start = time.perf_counter()
    opened = RAG.load(where / "index")
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    opened.search(qtexts[0], top_k=TOP_K)
    first_s = time.perf_counter() - start
    systems = {
        "ours, built": lambda q: built.search(q, top_k=TOP_K),
        "ours, opened": lambda q: opened.search(q, top_k=TOP_K),
        "bm25s": theirs,
    }
    lexical = timed(systems, qtexts, rounds)
    return {
        "docs": docs, "index_s": index_s, "bm25s_index_s": bm25s_index_s, "load_s": load_s,
        "first_query_s": first_s, "lexical": lexical,
        "opened_vs_built": ratio(lexical, "ours, opened", "ours, built"),
        "built_vs_bm25s": ratio(lexical, "ours, built", "bm25s"),
    }  # fmt: skip


def scale_dense(docs: int, rounds: int) -> dict[str, Any]:
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((docs, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    qvecs = rng.standard_normal((100, DIM), dtype=np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    qnames = [f"q{i}" for i in range(len(qvecs))]
    threshold, ann.ANN_THRESHOLD = ann.ANN_THRESHOLD, docs + 1  # the exact scan, not the approximate index
    try:
        rag = dense_rag(vectors, [f"v{i}" for i in range(docs)], dict(zip(qnames, qvecs, strict=True)))
        flat = faiss_search(vectors)
        systems = {
            "ours": lambda i: rag.search(qnames[i], top_k=TOP_K),
            "faiss flat": lambda i: flat(qvecs[i]),
        }
        dense = timed(systems, range(len(qvecs)), rounds)
    finally:
        ann.ANN_THRESHOLD = threshold
    return {"dense": dense, "dense_ratio": ratio(dense, "ours", "faiss flat")}


def show(title: str, figures: dict[str, Any]) -> None:
    print(title)
    for name, row in figures.items():
        print(f"  {name:<14} p50 {row['p50_ms']:8.3f} ms   p95 {row['p95_ms']:8.3f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scifact", default=str(DEFAULT_DATA), help="BEIR SciFact folder ('' to skip)")
    parser.add_argument("--docs", type=int, default=0, help="also measure at this many synthetic chunks")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the queries")
    parser.add_argument("--json", default="", help="also write the figures to this JSON file")
    parser.add_argument(
        "--rankings", default="", help="SciFact's top 10s: recorded to this JSON file, or compared with it"
    )
    parser.add_argument(
        "--rankings-embedder",
        choices=("hashing", "minilm"),
        default="hashing",
        help="the vectors of --rankings",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also time, beside faiss flat, the least a search returning hits can do with our scan",
    )
    parser.add_argument(
        "--cpu-time", action="store_true", help="time the searches by the process's CPU time, not wall time"
    )
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.cpu_time else time.perf_counter
    figures: dict[str, Any] = {}
    load = os.getloadavg()[0]
    if args.rankings:
        print(check_rankings(Path(args.scifact or DEFAULT_DATA), Path(args.rankings), args.rankings_embedder))
    if args.scifact:
        sf = figures["scifact"] = scifact(Path(args.scifact), args.rounds, args.floor)
        print(f"SciFact nDCG@10: ours {sf['ndcg10']['ours']:.4f}, bm25s {sf['ndcg10']['bm25s']:.4f}")
        show("SciFact lexical (300 queries)", sf["lexical"])
        show(
            f"SciFact dense, exact, dim {DIM} (top-10 agreement {sf['dense_top10_agreement']:.3f})",
            sf["dense"],
        )
        if args.floor:
            show("SciFact dense, exact: the least search returning hits, beside faiss", sf["dense_floor"])
    if args.docs:
        where = Path(tempfile.mkdtemp(prefix="selfrag-speed-"))
        try:
            sc = figures["scale"] = scale_lexical(args.docs, args.rounds, where)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        print(
            f"{args.docs:,} chunks: index {sc['index_s']:.0f} s (bm25s {sc['bm25s_index_s']:.0f} s), "
            f"load {sc['load_s']:.2f} s, first query {sc['first_query_s'] * 1e3:.0f} ms"
        )
        show(f"{args.docs:,} chunks, lexical (200 queries)", sc["lexical"])
        sd = figures["scale_dense"] = scale_dense(args.docs, args.rounds)
        show(f"{args.docs:,} random vectors, exact, dim {DIM} (100 queries)", sd["dense"])
    ratios = {
        f"{part} {k}": v for part, f in figures.items() for k, v in f.items() if "vs" in k or "ratio" in k
    }
    print("ratios (ours / theirs):")
    for name, value in ratios.items():
        print(f"  {name:<28} p50 {value['p50_ms']:.2f}x   p95 {value['p95_ms']:.2f}x")
    print("timed by", "the process's CPU time" if args.cpu_time else "wall time")
    print(
        f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, {os.cpu_count()} cores"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
