"""``selfrag index --ray [ADDRESS]``: reading, chunking and embedding as a Ray Data pipeline.

The files are read and chunked by Ray tasks (as the index chunks and tokenises them, its
sources' checksums shipped along, so an unchanged file is skipped as locally), then
embedded by ``map_batches`` with an embedder actor class (each actor loads the index's
embedder once). The driver streams the results back and adds them through the embedded
index's one write path (:meth:`~selfrag_core.store.rag.RAG.add_prepared`), then saves the
index once, under the writers' lock. A chunk's id is its source and position, so a batch
Ray retries is added as the same chunks. Progress is the driver's. Ray is imported when
the command runs, never with this module.
"""

from __future__ import annotations

import functools
import io
import logging
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from selfrag_core.cli.files import CLIError, EmptyFile, Gathered, Indexed, SkipFile, _drop_emptied, read_text
from selfrag_core.ingest import writer
from selfrag_core.progress import Progress

#: files a batch of the pipeline holds
BATCH = 32


def _same(embedder: Any) -> Any:
    return embedder


def embedder_recipe(embedder: Any) -> Callable[[], Any]:
    """How a worker makes the index's embedder: the local model loaded anew (once per
    actor), another embedder (the hashing one, ...) shipped as it is."""
    from selfrag_core.local.embeddings import LocalEmbeddings
    from selfrag_core.store.dense import HashingEmbeddings

    if isinstance(embedder, LocalEmbeddings):
        return LocalEmbeddings
    if isinstance(embedder, HashingEmbeddings):  # made anew: its word cache stays in its process
        return functools.partial(HashingEmbeddings, embedder.dim, embedder.ngram_range)
    return functools.partial(_same, embedder)


def read_and_prepare(batch: dict[str, Any], preparer: Any, encoding: str | None) -> dict[str, list[Any]]:
    """A batch of files read and chunked: per file, its prepared document (pickled; empty
    when unchanged or skipped) and why it was skipped (empty when it was not)."""
    out: dict[str, list[Any]] = {"path": [], "explicit": [], "source": [], "skip": [], "empty": [], "doc": []}
    docs = []
    for path, explicit, source in zip(batch["path"], batch["explicit"], batch["source"], strict=True):
        skip, empty = "", False
        try:
            docs.append({"text": read_text(Path(path), encoding), "source": source, "title": Path(path).name})
        except SkipFile as e:
            skip, empty = str(e) or type(e).__name__, isinstance(e, EmptyFile)
        for key, value in (("path", path), ("explicit", bool(explicit)), ("source", source), ("skip", skip)):
            out[key].append(value)
        out["empty"].append(empty)
    prepared = {d.source: d for d in preparer.prepare(docs)}
    out["doc"] = [pickle.dumps(prepared[s]) if s in prepared else b"" for s in out["source"]]
    return out


class Embedder:
    """The embedder actor of the pipeline: the index's embedder, loaded once."""

    def __init__(self, make: Callable[[], Any], preparer: Any) -> None:
        self.embedder, self.preparer = make(), preparer

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        docs = [pickle.loads(d) for d in batch["doc"] if len(d)]
        matrix = self.preparer.embed(self.embedder, docs) if self.embedder is not None else None
        vectors, row = [], 0
        for d in batch["doc"]:
            if not len(d) or matrix is None:
                vectors.append(b"")
                continue
            n = len(pickle.loads(d).chunks)
            buffer = io.BytesIO()
            np.save(buffer, matrix[row : row + n], allow_pickle=False)
            vectors.append(buffer.getvalue())
            row += n
        return {**batch, "vectors": vectors}


def index_on_ray(
    rag: Any,
    gathered: Gathered,
    progress: Progress,
    *,
    address: str | None,
    workers: int | None,
    encoding: str | None = None,
    verbose: bool = False,
    changed: bool = False,
) -> Indexed:
    """:func:`~selfrag_core.cli.files.index_paths` with the reading, chunking and embedding
    on Ray (the module docstring); ``workers``: the embedder actors (default: the
    cluster's CPUs)."""
    from selfrag_core.evaluation.ray import require_ray

    ray = require_ray()
    preparer = getattr(rag, "preparer", None)
    if not callable(preparer):
        raise CLIError(
            "--ray indexes into the embedded index (--index DIR); a --backend server embeds itself"
        )
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # its plan and progress: the driver's is shown
    try:
        return _pipeline(ray, rag, preparer(), gathered, progress, workers, encoding, verbose, changed)
    finally:
        if started:
            ray.shutdown()


def _pipeline(
    ray: Any, rag: Any, preparer: Any, gathered: Gathered, progress: Progress, workers: int | None,
    encoding: str | None, verbose: bool, changed: bool,
) -> Indexed:  # fmt: skip
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # the chunks in file order, as a local run adds them
    context.enable_progress_bars = False  # the driver's progress is the command's
    out = Indexed(skipped=gathered.ignored)
    if verbose:
        for path in gathered.ignored_files:
            progress.say(
                f"skipped: {path} ({path.suffix.lower()}: not read inside a folder; name the file to try it)"
            )
    items = [{"path": str(p), "explicit": e, "source": str(p.resolve())} for p, e in gathered.files]
    if not items:
        return out
    actors = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    data = ray.data.from_items(items, override_num_blocks=max(1, min(len(items) // BATCH + 1, 4 * actors)))
    data = data.map_batches(
        read_and_prepare, batch_size=BATCH, fn_kwargs={"preparer": preparer, "encoding": encoding}
    )
    data = data.map_batches(
        Embedder, batch_size=BATCH, fn_constructor_args=(embedder_recipe(rag.embedder), preparer),
        compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=1,
    )  # fmt: skip
    empty: list[str] = []
    added = 0
    with progress.task("indexing on Ray", len(items), "files") as advance:
        for batch in data.iter_batches(batch_size=BATCH, batch_format="default"):
            docs, vectors = [], []
            for i, source in enumerate(batch["source"]):
                if batch["skip"][i]:
                    out.skipped += 1
                    if batch["empty"][i]:
                        empty.append(str(source))
                    if batch["explicit"][i]:
                        out.problems.append(f"{batch['path'][i]} {batch['skip'][i]}")
                    if batch["explicit"][i] or verbose:
                        progress.say(f"skipped: {batch['path'][i]} {batch['skip'][i]}")
                    continue
                out.files += 1
                if len(batch["doc"][i]):
                    docs.append(pickle.loads(batch["doc"][i]))
                    if len(batch["vectors"][i]):
                        vectors.append(np.load(io.BytesIO(batch["vectors"][i]), allow_pickle=False))
            added += rag.add_prepared(docs, np.vstack(vectors) if vectors else None) if docs else 0
            advance(len(batch["source"]))
    out.emptied = _drop_emptied(writer(rag), empty, progress)
    if added or changed or any(out.emptied.values()):
        writer(rag).save()  # once, atomic, under the index's lock
    out.added = added
    return out
