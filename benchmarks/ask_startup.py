"""``selfrag ask`` start-up: the numpy query path against sentence-transformers, side by
side in one run (issue 52).

A hybrid MiniLM index of the demo's sample corpus is built first in a temporary directory
(``selfrag index ... --embedder minilm``). Then ``selfrag ask QUESTION --index DIR --llm
fake`` runs ``--runs`` times in a fresh process for each path, the two alternating (the
machine is shared):

* ``numpy``: as shipped: ``LocalEmbeddings.embed_query`` runs ``NumpyMiniLM``, torch is
  never imported;
* ``sentence-transformers``: the same with ``NumpyMiniLM`` made unable to load, so the
  embedder falls back to sentence-transformers (the path before issue 52).

Printed: each path's median wall time (and its fastest and slowest run), the ratio of the
medians, and whether the process imported torch.

With BEIR SciFact in ``../shared/data/scifact`` (``--data``), ``--agreement N`` (default
300: the test queries) also compares hybrid retrieval's top 10 over the whole corpus (one
chunk an abstract, ``RAG(LocalEmbeddings(), bm25_alpha=0.5)``; document vectors cached in
/tmp as ``retrieval_scifact.py`` caches them) with each query embedded both ways: how
many queries get the same ten in the same order, the same ten in any order, and the
largest difference between the two query vectors. ``--agreement 0`` skips it.

    PYTHONPATH=. python benchmarks/ask_startup.py
    PYTHONPATH=. python benchmarks/ask_startup.py --runs 9 --agreement 0

Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
DEMO = ROOT / "selfrag_core" / "data" / "demo"
QUESTION = "How do honeybees tell other bees where the flowers are?"
PATHS = ("numpy", "sentence-transformers")

#: one `selfrag ask` in a fresh process; argv[1] is the path, the rest the CLI's arguments
RUNNER = """
import sys
if sys.argv[1] == "sentence-transformers":
    from selfrag_core.local import minilm

    def unavailable(cls):
        raise FileNotFoundError("ask_startup: the numpy path is switched off")

    minilm.NumpyMiniLM.from_package = classmethod(unavailable)
from selfrag_core.cli import main

code = main(sys.argv[2:])
print("torch imported:", "torch" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def run_ask(path: str, index: Path) -> tuple[float, bool]:
    """Seconds for one ``selfrag ask`` on ``path``, and whether it imported torch."""
    argv = [sys.executable, "-c", RUNNER, path, "ask", QUESTION, "--index", str(index), "--llm", "fake"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or "honeybees.md" not in done.stdout:
        raise SystemExit(f"selfrag ask failed on the {path} path ({done.returncode}):\n{done.stderr}")
    return elapsed, "torch imported: True" in done.stderr


def startup(index: Path, runs: int) -> None:
    times: dict[str, list[float]] = {p: [] for p in PATHS}
    torch: dict[str, set[bool]] = {p: set() for p in PATHS}
    for i in range(runs):
        for path in PATHS if i % 2 == 0 else PATHS[::-1]:
            elapsed, imported = run_ask(path, index)
            times[path].append(elapsed)
            torch[path].add(imported)
    print(f"selfrag ask start-up, {runs} runs each (load {os.getloadavg()[0]:.1f}):")
    for path in PATHS:
        t = times[path]
        print(
            f"  {path:<22} median {statistics.median(t):6.2f} s  (min {min(t):.2f}, max {max(t):.2f})"
            f"  torch imported: {' / '.join(map(str, sorted(torch[path])))}"
        )
    ratio = statistics.median(times["sentence-transformers"]) / statistics.median(times["numpy"])
    print(f"  sentence-transformers / numpy: {ratio:.1f}x")


def agreement(data: Path, limit: int) -> None:
    """Hybrid top 10 on SciFact with the query embedded by numpy and by sentence-transformers."""
    from retrieval_scifact import CachedEmbeddings, load_scifact

    from selfrag_core.local.embeddings import LocalEmbeddings
    from selfrag_core.store import RAG

    corpus, queries, _ = load_scifact(data)
    texts = list(queries.values())[:limit]
    local = LocalEmbeddings(batch_size=64)
    start = time.perf_counter()
    rag = RAG(
        CachedEmbeddings(local, list(corpus.values())), bm25_alpha=0.5, chunk_size=20_000, chunk_overlap=0
    )
    rag.index_many([{"text": text, "source": did} for did, text in corpus.items()])
    print(f"SciFact: {rag.count()} chunks indexed in {time.perf_counter() - start:.0f} s")

    def top10() -> list[list[str]]:
        return [[h.source for h in rag.search(q, top_k=10)] for q in texts]

    numpy_vectors, numpy_top = local.embed_queries(texts), top10()
    local._queries = False  # the sentence-transformers path, as when NumpyMiniLM cannot load
    st_vectors, st_top = local.embed_queries(texts), top10()
    same = sum(a == b for a, b in zip(numpy_top, st_top, strict=True))
    as_sets = sum(set(a) == set(b) for a, b in zip(numpy_top, st_top, strict=True))
    cosine = np.sum(numpy_vectors * st_vectors, axis=1)
    n = len(texts)
    print(f"hybrid top-10 agreement, {n} SciFact queries, numpy against sentence-transformers:")
    print(f"  the same ten in the same order: {same}/{n}; the same ten in any order: {as_sets}/{n}")
    print(
        f"  query vectors: largest difference {np.abs(numpy_vectors - st_vectors).max():.1e}, "
        f"smallest cosine {cosine.min():.7f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="runs of each path (default 5; 0: none)")
    parser.add_argument("--agreement", type=int, default=300, help="SciFact queries compared (0: none)")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    args = parser.parse_args()
    if args.runs:
        with tempfile.TemporaryDirectory() as work:
            index = Path(work) / "index"
            cli = [sys.executable, "-m", "selfrag_core", "index", str(DEMO), "--index", str(index)]
            subprocess.run([*cli, "--embedder", "minilm"], check=True, capture_output=True)
            startup(index, args.runs)
    if args.agreement and (args.data / "corpus.jsonl").is_file():
        agreement(args.data, args.agreement)
    elif args.agreement:
        print(f"no SciFact at {args.data}: top-10 agreement not measured (pass --data)")


if __name__ == "__main__":
    main()
