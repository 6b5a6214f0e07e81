"""Opening a saved index rebuilds nothing: the BM25 arrays, the vectors and the chunks' columns
are memory-mapped, a chunk is decoded only when it is read, search results are the ones
before saving, and indexes of the previous formats still load."""

from __future__ import annotations

import json
import logging
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from old_index import copy_old_index

from selfrag_core.store import RAG, HashingEmbeddings, Tokenizer, persist
from selfrag_core.store.index import StoredChunks

bm25s = pytest.importorskip("bm25s")

FORMAT1 = Path(__file__).parent / "data" / "format1"  # written by selfrag's format 1 (same DOCS)
FORMAT2 = Path(__file__).parent / "data" / "format2"  # and by format 2 (chunks as JSON records)
DOCS = {
    "paris": "Paris is the capital of France. The city lies on the river Seine.",
    "berlin": "Berlin is the capital of Germany and its largest city.",
    "cairo": "تقع مدينة القاهرة على ضفاف نهر النيل",
}
WORDS = [
    "river", "capital", "city", "bridge", "tower", "market",
    "harbour", "valley", "castle", "garden", "museum", "station",
]  # fmt: skip
QUERIES = ["capital river", "castle garden", "harbour station museum", "نهر النيل", "zebra"]
MODES = {"lexical": {}, "hybrid": {"embed": "hashing"}, "dense": {"embed": "hashing", "bm25_alpha": 1.0}}


def corpus(n: int, offset: int = 0) -> list[dict[str, Any]]:
    """``n`` documents of a few words each, with some repeated, and a metadata field."""
    docs = []
    for i in range(offset, offset + n):
        words = [WORDS[(i * k + k) % len(WORDS)] for k in range(1, 2 + i % 7)]
        docs.append({"text": f"Document {i}: " + " ".join(words), "source": f"s{i}", "part": i % 3})
    return docs


def build(**kwargs: Any) -> RAG:
    rag = RAG(**kwargs)
    rag.index_many(corpus(60))
    for source, text in DOCS.items():
        rag.index(text, source=source)
    return rag


def results(rag: RAG, **filters: Any) -> list[list[tuple[Any, ...]]]:
    """Every query's hits with all their scores (exact floats) and metadata, in order."""
    return [
        [
            (h.id, h.score, h.lexical_score, h.dense_score, h.metadata)
            for h in rag.search(q, top_k=8, **filters)
        ]
        for q in QUERIES
    ]


def read_manifest(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    return data


def unchanged_base(rag: RAG) -> bool:
    """Whether the index's chunks are its saved base's, untouched (no deletion, no addition)."""
    chunks = rag._index.chunks
    return isinstance(chunks.base, StoredChunks) and chunks.kept is None and not chunks.tail


def is_mapped(array: np.ndarray) -> bool:
    return isinstance(array, np.memmap) or isinstance(array.base, np.memmap)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_loaded_index_gives_the_same_results_before_and_after_changes(tmp_path: Path, mode: str) -> None:
    rag = build(**MODES[mode])
    rag.save(tmp_path)  # before any search: the save builds the BM25 statistics it writes
    loaded = RAG.load(tmp_path)
    assert results(loaded) == results(rag)
    assert results(loaded, part=1) == results(rag, part=1)
    assert loaded.bm25_rebuilds == 0
    for r in (rag, loaded):  # the same changes on both: added, replaced, deleted
        r.index_many(corpus(5, offset=100))
        r.index("Paris: the river Seine and the Eiffel tower", source="paris")
        r.delete("s3")
    assert results(loaded) == results(rag)
    loaded.save()
    again = RAG.load(tmp_path)
    assert results(again) == results(rag) and again.sources() == rag.sources()
    assert again.bm25_rebuilds == 0


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_the_arrays_are_memory_mapped_and_searched_in_place(tmp_path: Path, mode: str) -> None:
    build(**MODES[mode]).save(tmp_path)
    loaded = RAG.load(tmp_path)
    index = loaded._index
    postings = index._lexical.segments[0][1]
    mapped = [postings.tf, postings.indices, postings.indptr, postings.lengths]
    if mode == "hybrid":
        mapped.append(index.vectors())
    assert all(is_mapped(a) and not a.flags.writeable for a in mapped)
    loaded.search("capital river")  # the first search builds nothing either
    tracemalloc.start()
    try:
        loaded.search("castle garden")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert index._lexical.segments == [(0, postings)] and all(is_mapped(a) for a in mapped)
    if mode == "hybrid":
        assert index.vectors() is mapped[-1]
        assert peak < index.vectors().nbytes / 4  # the vectors are read, not copied


def test_loading_neither_tokenises_nor_indexes_nor_embeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rag = build(embed="hashing")
    rag.save(tmp_path)
    expected = results(rag)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("called while loading a saved index")

    monkeypatch.setattr(bm25s.BM25, "index", forbidden)
    monkeypatch.setattr(HashingEmbeddings, "embed_documents", forbidden)
    with monkeypatch.context() as during_load:
        during_load.setattr(Tokenizer, "__call__", forbidden)
        loaded = RAG.load(tmp_path)
        assert RAG("hashing", path=tmp_path).count() == rag.count()
    assert results(loaded) == expected  # searching tokenises the query only
    assert loaded.bm25_rebuilds == 0


def test_an_index_of_the_previous_format_loads_and_is_rebuilt_once(tmp_path: Path) -> None:
    for name, embed in (("lexical", None), ("hybrid", "hashing")):
        root = tmp_path / name
        copy_old_index(FORMAT1 / name, root)
        assert read_manifest(root)["format_version"] == 1
        fresh = RAG(embed, chunk_size=300, chunk_overlap=30)
        for source, text in DOCS.items():
            fresh.index(text, source=source, lang="ar" if source == "cairo" else "en")
        loaded = RAG.load(root)
        assert loaded.sources() == fresh.sources()
        assert results(loaded) == results(fresh)
        assert loaded.bm25_rebuilds == 1  # from the chunks, at the first search, as format 1 did
        loaded.save()  # written in the current format
        manifest = read_manifest(root)
        assert manifest["format_version"] == persist.FORMAT_VERSION
        assert set(persist.BM25_FILES) <= set(manifest["files"])
        again = RAG.load(root)
        assert results(again) == results(fresh) and again.bm25_rebuilds == 0


def test_an_index_of_format_2_loads_and_is_rebuilt_once(tmp_path: Path) -> None:
    for name, embed in (("lexical", None), ("hybrid", "hashing")):
        root = tmp_path / name
        copy_old_index(FORMAT2 / name, root)
        assert read_manifest(root)["format_version"] == 2
        fresh = RAG(embed, chunk_size=300, chunk_overlap=30)
        for source, text in DOCS.items():
            fresh.index(text, source=source, lang="ar" if source == "cairo" else "en")
        loaded = RAG.load(root)
        assert loaded.sources() == fresh.sources()
        assert results(loaded) == results(fresh)
        assert loaded.bm25_rebuilds == 1  # its BM25 arrays hold scores, not term frequencies
        loaded.save()
        manifest = read_manifest(root)
        assert manifest["format_version"] == persist.FORMAT_VERSION
        assert set(persist.COLUMN_FILES) <= set(manifest["files"])
        again = RAG.load(root)
        assert unchanged_base(again)
        assert results(again) == results(fresh) and again.sources() == fresh.sources()
        assert again.bm25_rebuilds == 0


def test_loading_decodes_no_chunk_and_a_search_only_its_hits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rag = build(embed="hashing")
    rag.save(tmp_path)
    expected = results(rag)
    decoded: list[int] = []
    real = persist.StringColumn.__getitem__

    def counting(self: persist.StringColumn, i: Any) -> Any:
        decoded.append(i)
        return real(self, i)

    monkeypatch.setattr(persist.StringColumn, "__getitem__", counting)
    loaded = RAG.load(tmp_path)
    assert loaded.count() == rag.count() and not decoded
    index = loaded._index
    assert unchanged_base(loaded) and index._sources is None
    assert index.chunks.base is not None
    columns = index.chunks.base.columns
    for column in (columns.ids, columns.texts, columns.metadata, columns.sources, columns.checksums):
        assert is_mapped(column.blob) and is_mapped(column.offsets) and not column.blob.flags.writeable
    assert is_mapped(columns.chunk_sources)
    hits = loaded.search("castle garden", top_k=3)
    assert len(hits) == 3 and 0 < len(decoded) <= 4 * 3  # id, text, metadata, source of each hit
    assert index._sources is None and unchanged_base(loaded)
    assert results(loaded) == expected
    assert results(loaded, part=1) == results(rag, part=1)  # a filter parses the metadata, once
    assert index.chunks.base._metadata is not None
    assert loaded.sources() == rag.sources()
    assert loaded.index(DOCS["paris"], source="paris") == 0  # the checksum skip reads the sources
    assert unchanged_base(loaded)  # unchanged: still the columns


def test_an_unchanged_loaded_index_is_saved_as_it_was_read(tmp_path: Path) -> None:
    build(embed="hashing").save(tmp_path / "a")
    loaded = RAG.load(tmp_path / "a")
    loaded.search("capital river")
    loaded.sources()
    loaded.save(tmp_path / "b")
    assert unchanged_base(loaded)  # written from the columns, not decoded
    first, second = read_manifest(tmp_path / "a"), read_manifest(tmp_path / "b")
    assert first["files"] == second["files"]  # byte for byte
    loaded.delete("paris")  # the base's chunks of paris are left out, nothing is decoded
    chunks = loaded._index.chunks
    assert chunks.base is not None and chunks.kept is not None and not chunks.tail
    loaded.save(tmp_path / "c")  # elsewhere than its home: the whole index, encoded
    assert "delta" not in read_manifest(tmp_path / "c")
    reread = RAG.load(tmp_path / "c")
    assert "paris" not in reread.sources() and results(reread) == results(loaded)


def test_a_saved_bm25_index_of_other_stemming_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    build().save(tmp_path)
    if read_manifest(tmp_path)["tokenizer"].startswith("light"):
        pytest.skip("needs PyStemmer, so that stemmer=None tokenises otherwise")
    with caplog.at_level(logging.INFO, logger="selfrag"):
        loaded = RAG.load(tmp_path, stemmer=None)
    assert "rebuilt at the first search" in caplog.text
    assert results(loaded) == results(build(stemmer=None))
    assert loaded.bm25_rebuilds == 1


def test_without_autorebuild_the_saved_bm25_index_holds_every_chunk(tmp_path: Path) -> None:
    # term frequencies, not statistics, are saved: nothing is stale on disk
    rag = build(bm25_autorebuild=False)
    rag.rebuild_bm25_from_store()
    rag.index("Tokyo is the capital of Japan.", source="tokyo")
    assert "tokyo" not in {h.source for h in rag.search("Tokyo capital", top_k=5)}  # stale here
    rag.save(tmp_path / "stale")
    assert set(persist.BM25_FILES) <= set(read_manifest(tmp_path / "stale")["files"])
    assert rag.bm25_rebuilds == 1
    loaded = RAG.load(tmp_path / "stale", bm25_autorebuild=True)
    assert loaded.search("Tokyo")[0].source == "tokyo" and loaded.bm25_rebuilds == 0


def test_saving_over_the_mapped_index_it_was_loaded_from(tmp_path: Path) -> None:
    rag = build(embed="hashing")
    rag.save(tmp_path)
    loaded = RAG.load(tmp_path)
    loaded.save()  # writes the mapped arrays to a new data directory, removes the old one
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("data-")]) == 1
    assert results(loaded) == results(rag)  # still readable: the mapping outlives the removal
    assert results(RAG.load(tmp_path)) == results(rag)


def test_no_array_is_ever_loaded_with_pickle_allowed() -> None:
    root = Path(persist.__file__).parents[1]
    for path in root.rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if "np.load(" in line or "np.save(" in line:
                assert "allow_pickle=False" in line, f"{path}: {line.strip()}"
