"""Indexing throughput against the embedder alone, side by side in one run (issue 52).

The corpus is real text read offline: the first ``--docs`` abstracts of BEIR SciFact
(``../shared/data/scifact/corpus.jsonl``, title and text), written as one ``.txt`` file
each (``--per-file N``: N abstracts a file, long files as PEPs are), as ``selfrag index
FOLDER`` reads them. The chunks are exactly those the index
stores (the chunker of a new ``selfrag index`` index: recursive, 600 characters, overlap
100), and the benchmark checks that the index holds as many.

In one process, with one ``LocalEmbeddings()`` (the store's default MiniLM, as
``selfrag index`` opens it; loaded and warmed up before anything is timed), each round times:

* ``embedder``: MiniLM alone encoding those chunks, sentence-transformers' own
  ``model.encode(chunks, batch_size=32, normalize_embeddings=True)`` in one call;
* ``pipeline``: ``selfrag index``'s own path (:func:`selfrag_core.cli.files.index_paths`:
  read the files, check, chunk and tokenise them, embed, BM25, save) into a new hybrid
  index in a temporary directory;
* ``lexical``: the same into a lexical index (no embedder): the pipeline's own cost.

The rounds alternate (``--rounds``, default 3; the embedder first, then the pipeline
first) since the machine is shared; the best of each line is printed as chunks/s, with
the ratio pipeline/embedder of the bests and the median of each round's own ratio (the
target is 0.8 or more). ``--profile`` runs the hybrid pipeline once more under cProfile and prints
its top functions by cumulative time.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/index_throughput.py
    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/index_throughput.py --docs 1500 --rounds 5

Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CHUNK_SIZE = 600  # selfrag index's default --chunk-size (overlap: a sixth of it)


def write_corpus(corpus: Path, docs: int, folder: Path, per_file: int = 1) -> int:
    """The first ``docs`` documents of a BEIR corpus as .txt files in ``folder``,
    ``per_file`` of them a file (one after the other, a blank line apart); the files written."""
    folder.mkdir(parents=True)
    texts = []
    with corpus.open(encoding="utf-8") as lines:
        for line in lines:
            if len(texts) == docs:
                break
            doc = json.loads(line)
            text = f"{doc.get('title', '')}\n\n{doc['text']}".strip()
            if text:
                texts.append(text)
    files = 0
    for files, start in enumerate(range(0, len(texts), per_file), 1):
        joined = "\n\n".join(texts[start : start + per_file])
        (folder / f"doc{files:05d}.txt").write_text(joined + "\n", encoding="utf-8")
    return files


def pipeline_chunks(folder: Path) -> list[str]:
    """The chunk texts ``selfrag index`` stores for the files in ``folder``, in order."""
    from selfrag_core.cli.files import gather, read_text
    from selfrag_core.store import RAG

    rag = RAG(None, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_SIZE // 6)
    return [c.text for path, _ in gather([str(folder)]).files for c in rag.chunk(read_text(path))]


def time_embedder(embedder: Any, chunks: list[str]) -> float:
    start = time.perf_counter()
    vectors = embedder._sentence_transformers().encode(
        chunks, batch_size=embedder.batch_size, normalize_embeddings=True, convert_to_numpy=True,
        show_progress_bar=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    assert len(vectors) == len(chunks)
    return elapsed


def time_pipeline(embedder: Any, folder: Path, work: Path, expected: int) -> tuple[float, str]:
    """Seconds for ``selfrag index`` (``index_paths``) of ``folder`` into a new index,
    and its progress lines."""
    from selfrag_core.cli.files import gather, index_paths
    from selfrag_core.progress import Progress
    from selfrag_core.store import RAG

    target = work / "index"
    shutil.rmtree(target, ignore_errors=True)
    lines = io.StringIO()
    start = time.perf_counter()
    # as presets.open_index makes a new index for `selfrag index --embedder minilm`
    rag = RAG(embedder, path=target, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_SIZE // 6)
    done = index_paths(rag, gather([str(folder)]), Progress(plain=True, interval=1.0, stream=lines))
    elapsed = time.perf_counter() - start
    if done.added != expected or rag.count() != expected:
        raise SystemExit(f"the index holds {rag.count()} chunks ({done.added} added), not {expected}")
    return elapsed, lines.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DATA / "scifact" / "corpus.jsonl")
    parser.add_argument("--docs", type=int, default=500, help="corpus documents to index")
    parser.add_argument(
        "--per-file", type=int, default=1, help="documents a file (10: long files, as PEPs of 20-30 chunks)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best of each is kept")
    parser.add_argument("--no-lexical", action="store_true", help="skip the lexical line")
    parser.add_argument("--profile", action="store_true", help="profile one more hybrid pipeline run")
    parser.add_argument("--progress", action="store_true", help="print the last run's progress lines")
    args = parser.parse_args(argv)
    if not args.corpus.exists():
        print(f"no corpus at {args.corpus} (see ../shared/data/README.md)", file=sys.stderr)
        return 2

    import torch

    from selfrag_core.local.embeddings import LocalEmbeddings

    work = Path(tempfile.mkdtemp(prefix="selfrag-index-bench-"))
    try:
        folder = work / "docs"
        files = write_corpus(args.corpus, args.docs, folder, args.per_file)
        chunks = pipeline_chunks(folder)
        start = time.perf_counter()
        embedder = LocalEmbeddings()
        embedder.embed_documents(chunks[:64])  # warm up: the first calls pay one-off costs
        loaded = time.perf_counter() - start
        print(
            f"{args.docs} SciFact documents in {files} files, {len(chunks)} chunks "
            f"(recursive, {CHUNK_SIZE} chars); "
            f"{embedder.name}, batch {embedder.batch_size}, torch {torch.__version__} on "
            f"{torch.get_num_threads()} thread(s), {os.cpu_count()} core(s); model loaded in {loaded:.1f} s"
        )
        times: dict[str, list[float]] = {"embedder": [], "pipeline": [], "lexical": []}
        lines = ""
        ratios = []
        for r in range(args.rounds):
            load = os.getloadavg()[0]
            pipeline_first = r % 2 == 1  # the order alternates, so a drift in the load evens out
            if pipeline_first:
                elapsed, lines = time_pipeline(embedder, folder, work, len(chunks))
            times["embedder"].append(time_embedder(embedder, chunks))
            if not pipeline_first:
                elapsed, lines = time_pipeline(embedder, folder, work, len(chunks))
            times["pipeline"].append(elapsed)
            if not args.no_lexical:
                times["lexical"].append(time_pipeline(None, folder, work, len(chunks))[0])
            shown = ", ".join(f"{k} {len(chunks) / v[-1]:.1f}" for k, v in times.items() if v)
            ratios.append(times["embedder"][-1] / times["pipeline"][-1])
            print(f"round {r + 1} (load {load:.1f}): {shown} chunks/s; pipeline/embedder {ratios[-1]:.2f}x")
        best = {k: len(chunks) / min(v) for k, v in times.items() if v}
        print()
        print(f"{'':10} {'chunks/s':>9} {'best s':>8}   all s")
        for name, rate in best.items():
            every = " ".join(f"{t:.1f}" for t in times[name])
            print(f"{name:10} {rate:9.1f} {min(times[name]):8.1f}   {every}")
        ratio = best["pipeline"] / best["embedder"]
        print(
            f"pipeline/embedder: {ratio:.2f}x (best of {args.rounds}), {statistics.median(ratios):.2f}x "
            f"(median of the rounds' own ratios); target >= 0.8"
        )
        if args.progress:
            print("\nthe last hybrid run's progress lines (interval 1 s):\n" + lines.rstrip())
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            time_pipeline(embedder, folder, work, len(chunks))
            profile.disable()
            stats = io.StringIO()
            pstats.Stats(profile, stream=stats).sort_stats("cumulative").print_stats(35)
            print(stats.getvalue())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
