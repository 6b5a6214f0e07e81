"""The embedded store at scale: index, search, save and open a synthetic corpus.

The corpus is deterministic (a seeded numpy generator): ``--docs`` documents of 60
words each, drawn from a Zipf distribution (exponent 1) over a vocabulary of 50,000
made-up words, so a few words occur in nearly every document and most in a handful;
each document is one chunk. The queries are 200 strings of 3 words drawn from the
same distribution (another seed), so some hit very long posting lists.

Two phases, each in a fresh process so that its peak memory (``ru_maxrss``) is its own:

* ``build``: generate the corpus, ``index_many`` it plus the first search (which builds
  the BM25 statistics and the vector matrix), 200 searches (top 10, one at a time),
  ``save`` (time and size on disk);
* ``open``: ``RAG.load`` the saved index, time its first search apart (anything left
  lazy is paid there), then the same 200 searches.

Modes: ``lexical`` (``RAG()``, BM25 only) and ``hybrid`` (``RAG(HashingEmbeddings())``,
dense and BM25 at ``bm25_alpha=0.5``; above 100,000 chunks dense search goes through the
approximate index of the ``ann`` extra). Timings depend on the machine's load, which is
printed with the table; the index is written under ``--dir`` (default: a temporary
directory, removed afterwards) and read back from the page cache.

A third phase checks that quality did not move: nDCG@10 of the same mode on BEIR SciFact
(300 test queries, ``--scifact``, default ``../shared/data/scifact`` when it is there):
lexical 0.6863 and hybrid (``HashingEmbeddings()``, dim 256) 0.6577, to the last digit the
figures of the store before segments, term frequencies and the approximate index.

    python benchmarks/bench_scale.py                         # 100k documents, lexical
    python benchmarks/bench_scale.py --docs 1000000 --mode hybrid

Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

VOCABULARY = 50_000
WORDS_PER_DOC = 60
QUERIES = 200
WORDS_PER_QUERY = 3
TOP_K = 10
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


# ----------------------------------------------------------------------------- the corpus


def vocabulary() -> list[str]:
    """50,000 distinct made-up words of three syllables (no English stopword among them)."""
    rng = np.random.default_rng(7)
    n = len(_SYLLABLES)
    codes = rng.choice(n**3, size=VOCABULARY, replace=False)
    return [_SYLLABLES[c // n**2] + _SYLLABLES[c // n % n] + _SYLLABLES[c % n] for c in codes.tolist()]


def zipf_words(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` word ranks drawn from a Zipf distribution (exponent 1) over the vocabulary."""
    weights = 1.0 / np.arange(1, VOCABULARY + 1)
    return rng.choice(VOCABULARY, size=count, p=weights / weights.sum())


def corpus(docs: int) -> list[dict[str, str]]:
    words = vocabulary()
    rng = np.random.default_rng(2024)
    out: list[dict[str, str]] = []
    batch = 50_000
    for start in range(0, docs, batch):
        n = min(batch, docs - start)
        ranks = zipf_words(rng, n * WORDS_PER_DOC).reshape(n, WORDS_PER_DOC).tolist()
        out.extend(
            {"text": " ".join([words[r] for r in row]), "source": f"d{start + i}"}
            for i, row in enumerate(ranks)
        )
    return out


def queries() -> list[str]:
    words = vocabulary()
    ranks = zipf_words(np.random.default_rng(99), QUERIES * WORDS_PER_QUERY).reshape(QUERIES, -1)
    return [" ".join(words[r] for r in row) for row in ranks.tolist()]


# ----------------------------------------------------------------------------- the phases


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def search_times(rag: Any, texts: list[str]) -> dict[str, float]:
    times = []
    for q in texts:
        start = time.perf_counter()
        rag.search(q, top_k=TOP_K)
        times.append(time.perf_counter() - start)
    cuts = statistics.quantiles(times, n=20)
    return {"p50_ms": statistics.median(times) * 1e3, "p95_ms": cuts[18] * 1e3}


def make_rag(mode: str) -> Any:
    from selfrag_core.store import RAG, HashingEmbeddings

    return RAG() if mode == "lexical" else RAG(HashingEmbeddings(), bm25_alpha=0.5)


def build(docs: int, mode: str, target: Path) -> dict[str, Any]:
    start = time.perf_counter()
    documents = corpus(docs)
    generate_s = time.perf_counter() - start
    corpus_mib = peak_mib()
    rag = make_rag(mode)
    start = time.perf_counter()
    rag.index_many(documents)
    rag.search("warm up")  # builds the BM25 statistics (and the vector matrix): part of indexing
    index_s = time.perf_counter() - start
    timings = search_times(rag, queries())
    start = time.perf_counter()
    rag.save(target)
    save_s = time.perf_counter() - start
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    return {
        "chunks": rag.count(), "generate_s": generate_s, "index_s": index_s,
        "corpus_peak_mib": corpus_mib, "build_peak_mib": peak_mib(), **timings,
        "save_s": save_s, "size_mib": size / 2**20,
    }  # fmt: skip


def open_saved(target: Path) -> dict[str, Any]:
    from selfrag_core.store import RAG

    texts = queries()
    start = time.perf_counter()
    rag = RAG.load(target)
    load_s = time.perf_counter() - start
    load_mib = peak_mib()
    start = time.perf_counter()
    rag.search(texts[0], top_k=TOP_K)
    first_s = time.perf_counter() - start
    timings = search_times(rag, texts)
    return {
        "chunks": rag.count(), "load_s": load_s, "load_peak_mib": load_mib, "first_query_s": first_s,
        "open_p50_ms": timings["p50_ms"], "open_p95_ms": timings["p95_ms"], "open_peak_mib": peak_mib(),
    }  # fmt: skip


def scifact_ndcg(mode: str, root: Path) -> dict[str, Any]:
    """nDCG@10 over SciFact's test queries with the store in ``mode``, one chunk per abstract."""
    from retrieval_scifact import load_scifact, ndcg_at

    from selfrag_core.store import RAG, HashingEmbeddings

    corpus, queries, qrels = load_scifact(root)
    embed = HashingEmbeddings() if mode == "hybrid" else None
    rag = RAG(embed, bm25_alpha=0.5 if embed else None, chunk_size=20_000, chunk_overlap=0)
    rag.index_many([{"text": text, "source": did} for did, text in corpus.items()])
    scores = [ndcg_at([h.source for h in rag.search(q, top_k=10)], qrels[qid]) for qid, q in queries.items()]
    return {"scifact_ndcg10": statistics.fmean(scores), "scifact_queries": len(scores)}


def run_phase(args: argparse.Namespace, phase: str, target: Path) -> dict[str, Any]:
    """One phase in a fresh interpreter; its figures come back as the last line of its output."""
    command = [sys.executable, __file__, "--phase", phase, "--docs", str(args.docs), "--mode", args.mode]
    command += ["--scifact", args.scifact]
    done = subprocess.run([*command, "--dir", str(target)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the {phase} phase failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(
    args: argparse.Namespace, built: dict[str, Any], opened: dict[str, Any], quality: dict[str, Any]
) -> None:
    print(f"selfrag store at scale: {built['chunks']:,} chunks, mode {args.mode}, load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")  # fmt: skip
    rows = [
        ("corpus generation", f"{built['generate_s']:.1f} s (peak RSS {built['corpus_peak_mib']:.0f} MiB)"),
        ("index (index_many + first search)", f"{built['index_s']:.1f} s"),
        ("peak RSS, build", f"{built['build_peak_mib']:.0f} MiB"),
        ("query p50 / p95, built", f"{built['p50_ms']:.1f} / {built['p95_ms']:.1f} ms"),
        ("save", f"{built['save_s']:.2f} s, {built['size_mib']:.0f} MiB on disk"),
        ("load (RAG.load)", f"{opened['load_s']:.2f} s (peak RSS {opened['load_peak_mib']:.0f} MiB)"),
        ("first query after load", f"{opened['first_query_s'] * 1e3:.0f} ms"),
        ("query p50 / p95, loaded", f"{opened['open_p50_ms']:.1f} / {opened['open_p95_ms']:.1f} ms"),
        ("peak RSS, open", f"{opened['open_peak_mib']:.0f} MiB"),
    ]
    if quality:
        rows.append((f"SciFact nDCG@10 ({args.mode})", f"{quality['scifact_ndcg10']:.4f}"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=100_000, help="number of documents (one chunk each)")
    parser.add_argument("--mode", choices=("lexical", "hybrid"), default="lexical")
    parser.add_argument("--dir", default="", help="where to save the index (default: a temporary one)")
    parser.add_argument("--json", default="", help="also write the figures to this JSON file")
    default_scifact = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
    parser.add_argument(
        "--scifact", default=str(default_scifact) if default_scifact.is_dir() else "",
        help="BEIR SciFact folder for the quality check ('' to skip)",
    )  # fmt: skip
    parser.add_argument("--phase", choices=("build", "open", "quality"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase == "build":
        print(json.dumps(build(args.docs, args.mode, Path(args.dir))))
        return 0
    if args.phase == "open":
        print(json.dumps(open_saved(Path(args.dir))))
        return 0
    if args.phase == "quality":
        print(json.dumps(scifact_ndcg(args.mode, Path(args.scifact))))
        return 0
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="selfrag-scale-"))
    target = root / f"index-{args.mode}-{args.docs}"
    try:
        shutil.rmtree(target, ignore_errors=True)
        built = run_phase(args, "build", target)
        opened = run_phase(args, "open", target)
        quality = run_phase(args, "quality", target) if args.scifact else {}
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    report(args, built, opened, quality)
    if args.json:
        figures = {"args": vars(args), **built, **opened, **quality}
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
