"""Changing a large index costs what the change costs: documents added to a restored index
go after its saved base, deleted ones are left out of it by position, and a save into the
same directory writes only a delta, which another process reloads without the base.
Results are always those of an index built from scratch with the same documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_store_open import MODES, corpus, results

from selfrag_core.store import RAG, IndexFormatError, persist
from selfrag_core.store.index import Index


def manifest(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    return data


def changes(rag: RAG) -> None:
    """Added, replaced and deleted documents, some of them in the base."""
    rag.index_many(corpus(8, offset=100))
    rag.index("Document 3: castle museum station and a river", source="s3", part=1)  # replaced
    rag.delete("s5")
    rag.delete("s101")  # added since the base, then deleted


def from_scratch(**kwargs: Any) -> RAG:
    """The documents ``changes`` leaves, in the same order, indexed at once."""
    rag = RAG(**kwargs)
    docs = [d for d in corpus(60) if d["source"] not in ("s3", "s5")]
    docs += [d for d in corpus(8, offset=100) if d["source"] != "s101"]
    rag.index_many(docs)
    rag.index("Document 3: castle museum station and a river", source="s3", part=1)
    return rag


@pytest.mark.parametrize("mode", list(MODES))
def test_changes_to_a_restored_index_give_the_results_of_a_fresh_one(tmp_path: Path, mode: str) -> None:
    base = RAG(**MODES[mode])
    base.index_many(corpus(60))
    base.save(tmp_path)
    loaded = RAG.load(tmp_path)
    changes(loaded)
    fresh = from_scratch(**MODES[mode])
    assert results(loaded) == results(fresh)
    assert results(loaded, part=1) == results(fresh, part=1)
    assert loaded.sources() == fresh.sources() and loaded.count() == fresh.count()
    assert loaded.bm25_rebuilds == 0
    chunks = loaded._index.chunks
    assert chunks.base is not None and chunks.kept is not None and len(chunks.tail) == 8  # 7 added + s3


@pytest.mark.parametrize("mode", list(MODES))
def test_a_save_at_home_writes_a_delta_and_leaves_the_base(tmp_path: Path, mode: str) -> None:
    built = RAG(**MODES[mode])
    built.index_many(corpus(60))
    built.save(tmp_path)
    base = manifest(tmp_path)
    base_files = {p.name: p.read_bytes() for p in (tmp_path / base["data"]).iterdir()}
    loaded = RAG.load(tmp_path)
    changes(loaded)
    loaded.save()
    saved = manifest(tmp_path)
    assert (saved["data"], saved["files"], saved["chunks"]) == (base["data"], base["files"], 60)
    assert saved["delta"]["chunks"] == 8 and saved["delta"]["deleted"] == 2  # s3's and s5's chunks
    assert {p.name: p.read_bytes() for p in (tmp_path / base["data"]).iterdir()} == base_files
    again = RAG.load(tmp_path)
    fresh = from_scratch(**MODES[mode])
    assert results(again) == results(fresh) and again.sources() == fresh.sources()
    assert again.bm25_rebuilds == 0
    again.index("Document 200: a harbour", source="s200")  # a second delta replaces the first
    again.save()
    assert manifest(tmp_path)["delta"]["chunks"] == 9
    assert {p.name for p in tmp_path.iterdir() if p.name.startswith("data-")} == {
        base["data"],
        manifest(tmp_path)["delta"]["data"],
    }


def test_a_large_delta_is_merged_into_a_new_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Index, "DELTA_MIN", 5)
    rag = RAG("hashing", path=tmp_path)
    rag.index_many(corpus(60))
    rag.save()
    rag.index_many(corpus(5, offset=100))
    rag.save()
    assert manifest(tmp_path)["delta"]["chunks"] == 5
    rag.index_many(corpus(20, offset=200))  # 25 added, above 20% of 60: the whole index again
    rag.save()
    saved = manifest(tmp_path)
    assert "delta" not in saved and saved["chunks"] == 85
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("data-")] == [saved["data"]]
    fresh = RAG("hashing")
    fresh.index_many(corpus(60) + corpus(5, offset=100) + corpus(20, offset=200))
    assert results(RAG.load(tmp_path)) == results(fresh)
    rag.index_many(corpus(2, offset=300))  # the index now stands on the new base: a delta again
    rag.save()
    assert manifest(tmp_path)["delta"]["chunks"] == 2


def test_another_process_reloads_only_the_delta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = RAG("hashing", path=tmp_path)
    writer.index_many(corpus(60))
    writer.save()
    reader = RAG("hashing", path=tmp_path)  # another worker on the same directory
    base = reader._index.stored
    assert base is not None
    writer.index_many(corpus(3, offset=100))
    writer.delete("s7")
    writer.save()
    hashed: list[str] = []
    real = persist._sha256

    def counting(path: Path) -> str:
        hashed.append(path.parent.name)
        return real(path)

    monkeypatch.setattr(persist, "_sha256", counting)
    assert reader.refresh()
    delta = manifest(tmp_path)["delta"]["data"]
    assert hashed and set(hashed) == {delta}  # the base is neither hashed nor read again
    stored = reader._index.stored
    assert stored is not None and stored.columns is base.columns and stored.vectors is base.vectors
    assert results(reader) == results(writer) and reader.count() == 62


def test_a_crash_while_writing_a_delta_keeps_the_previous_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rag = RAG(path=tmp_path)
    rag.index_many(corpus(60))
    rag.save()
    expected = results(RAG.load(tmp_path))
    rag.index_many(corpus(3, offset=100))

    def crash(path: Path, array: np.ndarray) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(persist, "_write_file", crash)
    with pytest.raises(OSError, match="disk full"):
        rag.save()
    monkeypatch.undo()
    assert results(RAG.load(tmp_path)) == expected
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("data-")] == [manifest(tmp_path)["data"]]
    rag.save()  # and the next save succeeds
    assert RAG.load(tmp_path).count() == 63


@pytest.mark.parametrize(
    ("fault", "match"),
    [
        (lambda m: m["delta"].__setitem__("deleted", 5), "holds 1 positions, not 5"),
        (lambda m: m["delta"].__setitem__("deleted", 999), r"delta.deleted is 999"),
        (lambda m: m["delta"].__setitem__("data", m["data"]), "another directory than the base's"),
        (lambda m: m["delta"]["files"].pop("deleted.npy"), r"delta.files .*all of"),
        (lambda m: m["delta"]["files"].pop("vectors.npy"), "vectors.npy as in the base's"),
        (lambda m: m["delta"].__setitem__("extra", 1), "unknown fields"),
        (lambda m: m["delta"].__setitem__("data", "../x"), "plain file name"),
    ],
    ids=["count", "range", "same dir", "no deleted", "no vectors", "unknown field", "path"],
)
def test_a_malformed_delta_is_named(tmp_path: Path, fault: Any, match: str) -> None:
    rag = RAG("hashing", path=tmp_path)
    rag.index_many(corpus(10))
    rag.save()
    rag.index_many(corpus(2, offset=50))
    rag.delete("s3")
    rag.save()
    saved = manifest(tmp_path)
    fault(saved)
    (tmp_path / "manifest.json").write_text(json.dumps(saved), encoding="utf-8")
    with pytest.raises(IndexFormatError, match=match):
        RAG.load(tmp_path)


def test_deleted_positions_out_of_order_are_refused(tmp_path: Path) -> None:
    rag = RAG(path=tmp_path)
    rag.index_many(corpus(10))
    rag.save()
    rag.delete("s3")
    rag.delete("s5")
    rag.save()
    saved = manifest(tmp_path)
    path = tmp_path / saved["delta"]["data"] / "deleted.npy"
    np.save(path, np.array([5, 3], np.int64), allow_pickle=False)
    saved["delta"]["files"]["deleted.npy"] = persist._sha256(path)
    (tmp_path / "manifest.json").write_text(json.dumps(saved), encoding="utf-8")
    with pytest.raises(IndexFormatError, match="not ascending"):
        RAG.load(tmp_path)
