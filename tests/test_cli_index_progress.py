"""Issue 52: ``selfrag index`` into the embedded index counts chunks, and its progress
advances as each embedder call ends, from the first; not once per 32 files. A file the
index refuses is skipped, and what earlier batches added is saved when a later one fails."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import cli
from selfrag_core.cli import files
from selfrag_core.cli.files import gather, index_paths
from selfrag_core.store import RAG, HashingEmbeddings

pytest.importorskip("bm25s")


class Steps:
    """A Progress that records its steps and advances, beside the embedder's calls."""

    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log

    @contextmanager
    def task(self, description: str, total: int, unit: str = "items") -> Iterator[Callable[..., None]]:
        self.log.append(("start", description, total, unit))
        yield lambda n=1, description=None: self.log.append(("advance", n))
        self.log.append(("done", description))

    def say(self, text: str) -> None:
        self.log.append(("say", text))


class Batched:
    """The hashing embedder with a batch size of 4 (so calls of 8 texts), logging each call."""

    name = "batched-hashing"
    batch_size = 4

    def __init__(self, log: list[tuple[Any, ...]], fail_at: int | None = None) -> None:
        self.inner = HashingEmbeddings(64)
        self.log = log
        self.fail_at = fail_at
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> Any:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("the embedder failed")
        self.log.append(("embed", len(texts)))
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)


def folder(tmp_path: Path, files_: int = 3, paragraphs: int = 12) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for f in range(files_):
        text = "\n\n".join(f"File {f} paragraph {p} is about topic {p * 7 % 11}." for p in range(paragraphs))
        (docs / f"file{f}.txt").write_text(text + "\n", encoding="utf-8")
    return docs


def test_indexing_counts_chunks_and_advances_after_each_embedder_call(tmp_path: Path) -> None:
    log: list[tuple[Any, ...]] = []
    rag = RAG(Batched(log), path=tmp_path / "index", chunk_size=60, chunk_overlap=0)
    done = index_paths(rag, gather([str(folder(tmp_path))]), Steps(log))  # type: ignore[arg-type]

    start = log.index(("start", "indexing", done.added, "chunks"))  # the total is known from the start
    indexing = log[start + 1 : log.index(("done", "indexing"))]
    calls = [n for kind, n in indexing if kind == "embed"]
    assert done.files == 3 and done.added == rag.count() == sum(calls) > 4 * 8
    assert max(calls) == 8  # two of the embedder's batches a call
    # each call's chunks show as it ends: the first advance comes before the second call
    assert indexing == [entry for n in calls for entry in (("embed", n), ("advance", n))]
    assert RAG.load(tmp_path / "index", embed=Batched([])).count() == done.added  # saved


def test_a_later_batch_failing_keeps_what_earlier_batches_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "_BATCH_CHUNKS", 10)  # a batch a file (12 chunks each)
    rag = RAG(Batched([], fail_at=3), path=tmp_path / "index", chunk_size=60, chunk_overlap=0)
    with pytest.raises(RuntimeError, match="the embedder failed"):  # in the second file's batch
        index_paths(rag, gather([str(folder(tmp_path))]), Steps([]))  # type: ignore[arg-type]
    saved = RAG.load(tmp_path / "index", embed=Batched([]))
    assert [Path(s).name for s in saved.sources()] == ["file0.txt"]
    assert saved.count() == 12


def test_a_file_the_index_refuses_is_skipped_and_the_others_indexed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = folder(tmp_path, files_=2)
    (docs / "odd.txt").write_text("\x01\x02\x03 control characters \x04\x05\x06\x07" * 3, encoding="utf-8")
    target = tmp_path / "index"
    code = cli.main(["index", str(docs), "--index", str(target), "--embedder", "hashing", "-v"])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert "odd.txt cannot be indexed: text looks like binary data" in err
    assert sorted(Path(s).name for s in RAG.load(target).sources()) == ["file0.txt", "file1.txt"]
