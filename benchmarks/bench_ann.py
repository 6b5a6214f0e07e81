"""Approximate nearest-neighbour indexes against the exact scan, on the store's vectors.

The vectors are those the store's hybrid mode keeps: ``HashingEmbeddings()`` (dim 256,
unit norm, cosine = dot product) of bench_scale's synthetic corpus (``--docs``
documents of 60 Zipf-drawn words; see ``bench_scale.corpus``). The queries are
bench_scale's 200 three-word queries, embedded with ``embed_query``. The exact top 10
of each query (a numpy dot product over every vector) is the reference.

Embedding takes minutes at a million documents, so the vectors and the exact top 10 are
cached as ``.npy`` files under ``--dir`` (default: a temporary directory,
removed afterwards) and embedded in ``--jobs`` processes the first time.

Each library and variant (``--libs``) runs in a fresh process, so that its peak memory
(``ru_maxrss``, which counts the vectors it reads: compare with the ``exact`` row) is its
own. It builds the index over every vector, saves it, opens it again (the time to a
searchable index, from the page cache), then for each search parameter runs the 200
queries one at a time (top 10; a variant marked ``+rerank`` takes ``--rerank`` candidates
and re-ranks them by their exact dot product, as the store would) and reports p50 / p95
latency and recall@10 against the exact scan. Timings depend on the machine's load: it
is printed with the table, and the CPU may be shared with other jobs.

    python benchmarks/bench_ann.py                                   # 100k vectors, every library
    python benchmarks/bench_ann.py --docs 1000000 --libs faiss-ivf-flat,usearch --dir /tmp/ann

Nothing is asserted; the figures are printed. ``--scifact FOLDER`` measures the shipped
index's recall on BEIR SciFact instead (real text; the index forced on at 5,183 abstracts).

What it showed (2 cores shared with other jobs, load average 3 to 6): the hashing vectors
have little cluster or neighbourhood structure, so the IVF indexes must probe half their
lists for recall@10 0.95 (1M: IVF-flat nprobe 512 of 1024, p50 48 ms, 985 MiB; IVF-SQ8
36 ms) and the graphs stay near 0.6 at ef 256 on 200,000 vectors after builds of 77 s
(faiss HNSW), 119 s (hnswlib) and 103 to 188 s (usearch). An exhaustive scan of 4-bit
product-quantised codes (faiss ``PQ128x4fs``, 64 bytes a vector) with the best 1,000
re-ranked exactly gives recall@10 0.985 at 1M in a p50 of 7 ms, builds in 8 s and opens in
0.12 s: that is ``selfrag_core.store.ann``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale  # the corpus and the queries

TOP_K = 10
BATCH = 20_000


# ----------------------------------------------------------------------------- the vectors


def vectors(docs: int, root: Path, jobs: int) -> np.ndarray:
    """The documents' vectors (N, 256) float32, from the cache or embedded in ``jobs`` processes."""
    path = root / f"vectors-{docs}.npy"
    if not path.exists():
        start = time.perf_counter()
        bounds = [(s, min(s + BATCH, docs)) for s in range(0, docs, BATCH)]
        out = np.lib.format.open_memmap(path.with_suffix(".tmp.npy"), "w+", np.float32, (docs, 256))
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            texts = [d["text"] for d in bench_scale.corpus(docs)]
            chunks = [texts[a:b] for a, b in bounds]
            del texts
            for (a, b), vecs in zip(bounds, pool.imap(_embed_texts, chunks), strict=True):
                out[a:b] = vecs
        out.flush()
        del out
        path.with_suffix(".tmp.npy").rename(path)
        print(f"embedded {docs:,} documents in {time.perf_counter() - start:.0f} s ({jobs} processes)")
    return np.load(path, mmap_mode="r")


def _embed_texts(texts: list[str]) -> np.ndarray:
    from selfrag_core.store.dense import HashingEmbeddings

    return HashingEmbeddings().embed_documents(texts)


def query_vectors() -> np.ndarray:
    from selfrag_core.store.dense import HashingEmbeddings

    emb = HashingEmbeddings()
    return np.stack([emb.embed_query(q) for q in bench_scale.queries()]).astype(np.float32)


def exact_top(vecs: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """(q, k) positions of the exact top k by dot product, best first (scanned in blocks)."""
    best_scores = np.full((len(queries), 0), -np.inf, np.float32)
    best_ids = np.zeros((len(queries), 0), np.int64)
    for start in range(0, len(vecs), 200_000):
        block = np.asarray(vecs[start : start + 200_000])
        scores = np.concatenate([best_scores, queries @ block.T], axis=1)
        ids = np.concatenate(
            [best_ids, np.arange(start, start + len(block))[None, :].repeat(len(queries), 0)], 1
        )
        keep = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        best_scores = np.take_along_axis(scores, keep, 1)
        best_ids = np.take_along_axis(ids, keep, 1)
    order = np.argsort(-best_scores, axis=1, kind="stable")
    return np.take_along_axis(best_ids, order, 1)


def truth(docs: int, root: Path, vecs: np.ndarray, queries: np.ndarray) -> np.ndarray:
    path = root / f"exact-top{TOP_K}-{docs}.npy"
    if not path.exists():
        np.save(path, exact_top(vecs, queries, TOP_K))
    return np.load(path)


# ----------------------------------------------------------------------------- the libraries


class Variant:
    """One library configuration: ``build``, ``save``, ``open`` and a search per parameter."""

    name = ""
    params = ""
    sweep: tuple[Any, ...] = ()  # search parameters, or (parameter, candidates re-ranked)

    def build(self, vecs: np.ndarray) -> None:
        raise NotImplementedError

    def save(self, path: Path) -> None:
        raise NotImplementedError

    def open(self, path: Path) -> None:
        raise NotImplementedError

    def set_search(self, value: int) -> None:
        raise NotImplementedError

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        raise NotImplementedError


def _nlist(n: int) -> int:
    """About sqrt(N) lists, a power of two, at least 16."""
    return max(16, 1 << round(np.log2(max(n, 1)) / 2))


class FaissVariant(Variant):
    """A faiss index: written and read with faiss's own files (memory-mapped where it can)."""

    mmap = True

    def __init__(self, threads: int) -> None:
        import faiss  # type: ignore[import-untyped]

        self.faiss = faiss
        faiss.omp_set_num_threads(threads)

    def save(self, path: Path) -> None:
        self.faiss.write_index(self.index, str(path))

    def open(self, path: Path) -> None:
        flags = (self.faiss.IO_FLAG_MMAP_IFC,) if self.mmap else ()
        self.index = self.faiss.read_index(str(path), *flags)

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        return self.index.search(q, k)[1]  # type: ignore[no-any-return]


class FaissIVF(FaissVariant):
    def __init__(self, kind: str, threads: int) -> None:
        super().__init__(threads)
        self.kind = kind
        self.name = f"faiss-ivf-{kind}"
        self.sweep = (16, 64, 128, 256, 512)

    def build(self, vecs: np.ndarray) -> None:
        faiss = self.faiss
        n, d = vecs.shape
        nlist = _nlist(n)
        train_n = min(n, 64 * nlist)
        self.params = f"nlist={nlist}, trained on {train_n:,}"
        quantizer = faiss.IndexFlatIP(d)
        if self.kind == "flat":
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            qtype = {"sq8": faiss.ScalarQuantizer.QT_8bit, "fp16": faiss.ScalarQuantizer.QT_fp16}[self.kind]
            index = faiss.IndexIVFScalarQuantizer(quantizer, d, nlist, qtype, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = 0
        rng = np.random.default_rng(0)
        sample = np.ascontiguousarray(vecs[np.sort(rng.choice(n, train_n, replace=False))])
        index.train(sample)
        for start in range(0, n, 100_000):
            index.add(np.ascontiguousarray(vecs[start : start + 100_000]))
        self.index = index

    def set_search(self, value: int) -> None:
        self.index.nprobe = value


class FaissHNSW(FaissVariant):
    name = "faiss-hnsw"
    sweep = (32, 64, 128, 256)

    def build(self, vecs: np.ndarray) -> None:
        faiss = self.faiss
        index = faiss.IndexHNSWFlat(vecs.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 64
        self.params = "M=32, efConstruction=64"
        for start in range(0, len(vecs), 100_000):
            index.add(np.ascontiguousarray(vecs[start : start + 100_000]))
        self.index = index

    def set_search(self, value: int) -> None:
        self.index.hnsw.efSearch = value


class Hnswlib(Variant):
    name = "hnswlib"
    sweep = (32, 64, 128, 256)

    def __init__(self, threads: int) -> None:
        import hnswlib  # type: ignore[import-not-found]

        self.hnswlib = hnswlib
        self.threads = threads

    def build(self, vecs: np.ndarray) -> None:
        index = self.hnswlib.Index(space="ip", dim=vecs.shape[1])
        index.init_index(max_elements=len(vecs), M=16, ef_construction=100, random_seed=0)
        index.set_num_threads(self.threads)
        self.params = "M=16, ef_construction=100"
        for start in range(0, len(vecs), 100_000):
            block = np.ascontiguousarray(vecs[start : start + 100_000])
            index.add_items(block, np.arange(start, start + len(block)))
        self.index = index
        self.dim = vecs.shape[1]

    def save(self, path: Path) -> None:
        self.index.save_index(str(path))

    def open(self, path: Path) -> None:
        self.index = self.hnswlib.Index(space="ip", dim=self.dim)
        self.index.load_index(str(path))
        self.index.set_num_threads(1)

    def set_search(self, value: int) -> None:
        self.index.set_ef(value)

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        return self.index.knn_query(q, k)[0].astype(np.int64)  # type: ignore[no-any-return]


class Usearch(Variant):
    sweep = (32, 64, 128, 256)

    def __init__(self, dtype: str, threads: int) -> None:
        from usearch.index import Index  # type: ignore[import-not-found]

        self.Index = Index
        self.dtype = dtype
        self.threads = threads
        self.name = f"usearch-{dtype}"

    def build(self, vecs: np.ndarray) -> None:
        index = self.Index(
            ndim=vecs.shape[1], metric="ip", dtype=self.dtype, connectivity=16, expansion_add=128
        )
        self.params = "connectivity=16, expansion_add=128"
        for start in range(0, len(vecs), 100_000):
            block = np.ascontiguousarray(vecs[start : start + 100_000])
            index.add(np.arange(start, start + len(block)), block, threads=self.threads)
        self.index = index

    def save(self, path: Path) -> None:
        self.index.save(str(path))

    def open(self, path: Path) -> None:
        self.index = self.Index.restore(str(path), view=True)

    def set_search(self, value: int) -> None:
        self.index.expansion_search = value

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        keys = self.index.search(q, k, threads=1).keys
        return np.asarray(keys, dtype=np.int64).reshape(len(q), -1)


class FaissFastScan(FaissVariant):
    """Product quantisation with 4-bit codes scanned in SIMD registers (faiss "fast scan"),
    exhaustive or behind an IVF; the candidates are re-ranked exactly."""

    mmap = False

    def __init__(self, m: int, ivf: bool, threads: int) -> None:
        super().__init__(threads)
        self.m = m
        self.ivf = ivf
        self.name = f"faiss-{'ivf-' if ivf else ''}pq{m}fs"
        self.sweep = (
            ((64, 200), (128, 200), (256, 200), (256, 500), (512, 500))
            if ivf
            else ((0, 100), (0, 200), (0, 500), (0, 1000))
        )

    def build(self, vecs: np.ndarray) -> None:
        faiss = self.faiss
        n, d = vecs.shape
        nlist = _nlist(n)
        key = (f"IVF{nlist}," if self.ivf else "") + f"PQ{self.m}x4fs"
        train_n = min(n, max(64 * nlist if self.ivf else 0, 16_384))
        self.params = f"{key}, trained on {train_n:,}"
        index = faiss.index_factory(d, key, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(0)
        sample = np.ascontiguousarray(vecs[np.sort(rng.choice(n, train_n, replace=False))])
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # many small k-means steps: threads stall on a busy machine
        index.train(sample)
        faiss.omp_set_num_threads(threads)
        for start in range(0, n, 100_000):
            index.add(np.ascontiguousarray(vecs[start : start + 100_000]))
        self.index = index

    def set_search(self, value: int) -> None:
        if self.ivf:
            self.index.nprobe = value


class SelfragANN(Variant):
    """What the store ships: ``selfrag_core.store.ann.ApproximateIndex`` (search_exact)."""

    name = "selfrag-ann"

    def __init__(self, threads: int) -> None:
        import faiss

        from selfrag_core.store import ann

        faiss.omp_set_num_threads(threads)
        self.ann = ann
        self.sweep = tuple((0, c) for c in sorted({100, 200, 500, 1000, 2000, ann.RERANK}))

    def build(self, vecs: np.ndarray) -> None:
        self.index = self.ann.ApproximateIndex.build(vecs)
        self.params = f"{self.index!r}".replace("ApproximateIndex", "").split(",")[0].strip("(")
        self.params += (
            f", {self.ann._subquantizers(vecs.shape[1])}x4 bits, trained on {self.ann._TRAIN_SAMPLE:,}"
        )

    def save(self, path: Path) -> None:
        with open(path, "wb") as f:
            np.save(f, self.index.to_array())

    def open(self, path: Path) -> None:
        self.index = self.ann.ApproximateIndex.from_array(np.load(path, mmap_mode="r", allow_pickle=False))

    def set_search(self, value: int) -> None:
        pass

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        return self.index.search(q, k)[0]  # type: ignore[no-any-return]


VARIANTS: dict[str, Callable[[int], Variant]] = {
    "faiss-ivf-flat": lambda t: FaissIVF("flat", t),
    "faiss-ivf-sq8": lambda t: FaissIVF("sq8", t),
    "faiss-hnsw": FaissHNSW,
    "hnswlib": Hnswlib,
    "usearch-f16": lambda t: Usearch("f16", t),
    "usearch-i8": lambda t: Usearch("i8", t),
    "selfrag-ann": SelfragANN,
    "faiss-pq64fs": lambda t: FaissFastScan(64, False, t),
    "faiss-pq128fs": lambda t: FaissFastScan(128, False, t),
    "faiss-pq256fs": lambda t: FaissFastScan(256, False, t),
    "faiss-ivf-pq64fs": lambda t: FaissFastScan(64, True, t),
    "faiss-ivf-pq128fs": lambda t: FaissFastScan(128, True, t),
}
RERANKED = {
    "faiss-ivf-sq8",
    "usearch-i8",
    "usearch-f16",
    "selfrag-ann",
    *(k for k in VARIANTS if k.endswith("fs")),
}


# ----------------------------------------------------------------------------- one run


def peak_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(
        np.mean([len(set(f.tolist()) & set(e.tolist())) / len(e) for f, e in zip(found, exact, strict=True)])
    )


def run_one(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    vecs = np.load(root / f"vectors-{args.docs}.npy", mmap_mode="r")
    exact = np.load(root / f"exact-top{TOP_K}-{args.docs}.npy")
    queries = query_vectors()
    out: dict[str, Any] = {"name": args.run_one, "base_mib": peak_mib()}
    if args.run_one == "exact":
        matrix = np.load(root / f"vectors-{args.docs}.npy")
        times = []
        for q in queries:
            start = time.perf_counter()
            scores = matrix @ q
            np.argpartition(-scores, TOP_K)[:TOP_K]
            times.append(time.perf_counter() - start)
        out["runs"] = [_timing("", times, 1.0)]
        out["peak_mib"] = peak_mib()
        return out
    variant = VARIANTS[args.run_one](args.threads)
    rerank = args.run_one in RERANKED
    start = time.perf_counter()
    variant.build(vecs)
    out["build_s"] = time.perf_counter() - start
    out["params"] = variant.params + (", exact re-rank" if rerank else "")
    out["build_peak_mib"] = peak_mib()
    path = root / f"ann-{args.run_one}-{args.docs}.bin"
    start = time.perf_counter()
    variant.save(path)
    out["save_s"] = time.perf_counter() - start
    out["size_mib"] = path.stat().st_size / 2**20
    del variant
    variant = VARIANTS[args.run_one](args.threads)
    variant.dim = vecs.shape[1]  # type: ignore[attr-defined]
    start = time.perf_counter()
    variant.open(path)
    out["open_s"] = time.perf_counter() - start
    runs = []
    for value in variant.sweep:
        value, candidates = value if isinstance(value, tuple) else (value, args.rerank if rerank else TOP_K)
        variant.set_search(value)
        found, times = [], []
        for q in queries:
            start = time.perf_counter()
            ids = variant.search(q[None, :], candidates)[0]
            if rerank:
                ids = _rerank(vecs, q, ids[ids >= 0])
            times.append(time.perf_counter() - start)
            found.append(ids[:TOP_K])
        label = f"{value} / {candidates}" if rerank else value
        runs.append(_timing(label, times, recall(np.array(found), exact)))
    out["runs"] = runs
    out["peak_mib"] = peak_mib()
    path.unlink()
    return out


def _rerank(vecs: np.ndarray, q: np.ndarray, ids: np.ndarray) -> np.ndarray:
    ids = np.sort(ids)
    scores = np.asarray(vecs[ids]) @ q
    return ids[np.argsort(-scores, kind="stable")[:TOP_K]]  # type: ignore[no-any-return]


def _timing(value: Any, times: list[float], rec: float) -> dict[str, Any]:
    cuts = statistics.quantiles(times, n=20)
    return {
        "search": value,
        "p50_ms": statistics.median(times) * 1e3,
        "p95_ms": cuts[18] * 1e3,
        "recall": rec,
    }


# ----------------------------------------------------------------------------- real text


def scifact(folder: Path) -> None:
    """Recall@10 of the shipped index (forced on, whatever the size) against the exact scan on
    BEIR SciFact: every abstract (title and text) and every claim, hashing embeddings."""
    from selfrag_core.store import ann
    from selfrag_core.store.dense import HashingEmbeddings

    docs = [json.loads(line) for line in (folder / "corpus.jsonl").open(encoding="utf-8")]
    claims = [json.loads(line)["text"] for line in (folder / "queries.jsonl").open(encoding="utf-8")]
    emb = HashingEmbeddings()
    vecs = emb.embed_documents([f"{d['title']} {d['text']}" for d in docs])
    queries = np.stack([emb.embed_query(c) for c in claims])
    exact = exact_top(vecs, queries, TOP_K)
    start = time.perf_counter()
    index = ann.ApproximateIndex.build(vecs)
    build_s = time.perf_counter() - start
    print(f"\nSciFact: {len(docs):,} abstracts, {len(claims):,} claims, {index!r}, built in {build_s:.1f} s")
    for candidates in (50, 100, ann.RERANK, 500):
        found = index.search_exact(queries, TOP_K, vecs, candidates=candidates)[0]
        print(f"  {candidates:>4} candidates re-ranked: recall@10 {recall(found, exact):.3f}")


# ----------------------------------------------------------------------------- the table


def report(args: argparse.Namespace, results: list[dict[str, Any]], load: tuple[float, float]) -> None:
    print(f"\nANN against the exact scan: {args.docs:,} vectors of dim 256, {len(bench_scale.queries())} "
          f"queries, top {TOP_K}, {args.threads} build threads, 1 query at a time; load average "
          f"{load[0]:.2f} before / {load[1]:.2f} after on {os.cpu_count()} cores")  # fmt: skip
    head = f"{'library':<16} {'params':<44} {'build s':>8} {'MiB':>6} {'open s':>7} {'peak MiB':>9}  search"
    print(head)
    print("-" * len(head))
    for r in results:
        first = True
        for run in r["runs"]:
            if first:
                build = f"{r['build_s']:8.1f}" if "build_s" in r else f"{'-':>8}"
                size = f"{r['size_mib']:6.0f}" if "size_mib" in r else f"{'-':>6}"
                opened = f"{r['open_s']:7.3f}" if "open_s" in r else f"{'-':>7}"
                left = f"{r['name']:<16} {r.get('params', 'numpy dot product'):<44} {build} {size} {opened}"
                left += f" {r['peak_mib']:9.0f}"
            else:
                left = " " * (16 + 1 + 44 + 1 + 8 + 1 + 6 + 1 + 7 + 1 + 9)
            first = False
            label = f"{run['search']!s:>10}" if run["search"] != "" else f"{'-':>10}"
            print(f"{left}  {label}: p50 {run['p50_ms']:6.2f} ms, p95 {run['p95_ms']:6.2f} ms, "
                  f"recall@10 {run['recall']:.3f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=100_000, help="number of documents (one vector each)")
    parser.add_argument("--libs", default="exact," + ",".join(VARIANTS), help="comma-separated variants")
    parser.add_argument("--dir", default="", help="where to cache the vectors (default: a temporary one)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="build threads")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="embedding processes")
    parser.add_argument("--rerank", type=int, default=40, help="candidates re-ranked by +rerank variants")
    parser.add_argument("--json", default="", help="also write the figures to this JSON file")
    parser.add_argument("--scifact", default="", help="a BEIR SciFact folder: measure recall on it instead")
    parser.add_argument("--run-one", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scifact:
        scifact(Path(args.scifact))
        return 0
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="selfrag-ann-"))
    if args.run_one:
        print(json.dumps(run_one(args, root)))
        return 0
    root.mkdir(parents=True, exist_ok=True)
    try:
        vecs = vectors(args.docs, root, args.jobs)
        truth(args.docs, root, vecs, query_vectors())
        del vecs
        load_before = os.getloadavg()[0]
        results = []
        for name in [n.strip() for n in args.libs.split(",") if n.strip()]:
            if name != "exact" and name not in VARIANTS:
                sys.exit(f"unknown variant {name!r}; choose among exact, {', '.join(VARIANTS)}")
            command = [
                sys.executable,
                __file__,
                "--run-one",
                name,
                "--docs",
                str(args.docs),
                "--dir",
                str(root),
            ]
            command += ["--threads", str(args.threads), "--rerank", str(args.rerank)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(
                    f"{name}: failed or not installed:\n{done.stderr.strip().splitlines()[-1:]}",
                    file=sys.stderr,
                )
                continue
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
        report(args, results, (load_before, os.getloadavg()[0]))
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2) + "\n")
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
