"""Persistence: round trip, atomic saves, corrupt and foreign directories, embedder identity."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from selfrag_core.store import RAG, EmbedderMismatchError, HashingEmbeddings, IndexFormatError, persist

DOCS = {
    "paris": "Paris is the capital of France. The city lies on the river Seine.",
    "berlin": "Berlin is the capital of Germany and its largest city.",
    "cairo": "تقع مدينة القاهرة على ضفاف نهر النيل",
}


def make(**kwargs: object) -> RAG:
    rag = RAG(**kwargs)  # type: ignore[arg-type]
    for source, text in DOCS.items():
        rag.index(text, source=source, lang="ar" if source == "cairo" else "en")
    return rag


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def manifest(root: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("embed", [None, "hashing"])
def test_round_trip_keeps_chunks_sources_and_results(tmp_path: Path, embed: str | None) -> None:
    rag = make(embed=embed, chunker="recursive", chunk_size=300, chunk_overlap=30)
    rag.save(tmp_path / "idx")
    loaded = RAG.load(tmp_path / "idx")
    assert loaded.count() == rag.count() and loaded.sources() == rag.sources()
    assert loaded.chunker.chunk_size == 300 and loaded.bm25_alpha == rag.bm25_alpha
    for q in ("capital of Germany", "river Seine", "نهر النيل"):
        assert [(h.id, h.metadata) for h in loaded.search(q)] == [(h.id, h.metadata) for h in rag.search(q)]
    assert loaded.index(DOCS["paris"], source="paris", lang="en") == 0  # checksum skip survives
    if embed:
        assert isinstance(loaded.embedder, HashingEmbeddings)
        h1, h2 = rag.search("capital")[0], loaded.search("capital")[0]
        assert h1.dense_score == pytest.approx(h2.dense_score)
        assert manifest(tmp_path / "idx")["embedder"] == {"name": rag._index.identity()["name"], "dim": 256}  # type: ignore[index]


def test_path_argument_loads_and_saves(tmp_path: Path) -> None:
    target = tmp_path / "auto"
    rag = RAG(path=target)
    rag.index(DOCS["paris"], source="paris")
    assert rag.save() == target
    again = RAG(path=target)
    assert again.count() == 1 and again.search("Seine")[0].source == "paris"
    again.index(DOCS["berlin"], source="berlin")
    again.save()
    assert RAG(path=target).count() == 2
    data_dirs = {p.name for p in target.iterdir() if p.name.startswith("data-")}
    saved = manifest(target)
    assert saved["delta"]["chunks"] == 1  # the base saved before, and a delta of the new document
    assert data_dirs == {saved["data"], saved["delta"]["data"]}  # nothing else left
    with pytest.raises(ValueError, match="no path"):
        RAG().save()


def test_no_pickle_anywhere(tmp_path: Path) -> None:
    make(embed="hashing").save(tmp_path)
    data = tmp_path / str(manifest(tmp_path)["data"])
    assert sorted(p.name for p in data.iterdir()) == sorted(
        ["store.json", *persist.COLUMN_FILES, "vectors.npy", *persist.BM25_FILES]
    )
    for name in sorted(p.name for p in data.iterdir() if p.suffix == ".npy"):
        np.load(data / name, allow_pickle=False)  # plain numeric arrays
    # an object array (which needs pickle) is refused, even with a matching checksum
    np.save(data / "vectors.npy", np.array([{"a": 1}] * 3, dtype=object), allow_pickle=True)
    m = manifest(tmp_path)
    m["files"]["vectors.npy"] = persist._sha256(data / "vectors.npy")  # type: ignore[index]
    (tmp_path / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    with pytest.raises(IndexFormatError, match="not a numeric array"):
        RAG.load(tmp_path)


def test_failed_save_keeps_the_previous_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rag = make(embed="hashing")
    rag.save(tmp_path)
    before = snapshot(tmp_path)
    rag.index("Tokyo is the capital of Japan.", source="tokyo")

    def crash(path: Path, array: np.ndarray) -> None:
        path.write_bytes(b"\x93NUMPY half written")
        raise OSError("disk full")

    monkeypatch.setattr(persist, "_write_file", crash)
    with pytest.raises(OSError, match="disk full"):
        rag.save(tmp_path)
    assert snapshot(tmp_path) == before  # nothing half-written left behind
    loaded = RAG.load(tmp_path)
    assert loaded.count() == 3 and "tokyo" not in loaded.sources()


def test_crash_before_manifest_switch_keeps_previous_index(tmp_path: Path) -> None:
    rag = make()
    rag.save(tmp_path)
    # what a process killed mid-save leaves: a complete or partial new data dir, a temp manifest
    (tmp_path / "data-deadbeef.tmp").mkdir()
    (tmp_path / "data-deadbeef.tmp" / "store.json").write_text('{"chunks": [', encoding="utf-8")
    (tmp_path / "manifest.json.data-deadbeef.tmp").write_text("{", encoding="utf-8")
    loaded = RAG.load(tmp_path)
    assert loaded.count() == 3
    loaded.index("Tokyo is the capital of Japan.", source="tokyo")
    loaded.save()
    names = sorted(p.name for p in tmp_path.iterdir() if p.name != persist.LOCK_FILE)
    saved = manifest(tmp_path)
    assert names == sorted([saved["data"], saved["delta"]["data"], "manifest.json"])  # leftovers cleaned
    assert RAG.load(tmp_path).count() == 4


def test_corrupt_data_is_detected_and_left_untouched(tmp_path: Path) -> None:
    make().save(tmp_path)
    store = tmp_path / str(manifest(tmp_path)["data"]) / "texts.npy"
    assert b"Paris" in store.read_bytes()
    store.write_bytes(store.read_bytes().replace(b"Paris", b"Pxris"))
    before = snapshot(tmp_path)
    with pytest.raises(IndexFormatError, match="corrupt"):
        RAG.load(tmp_path)
    with pytest.raises(IndexFormatError, match="corrupt"):
        RAG(path=tmp_path)
    store.unlink()
    with pytest.raises(IndexFormatError, match="missing"):
        RAG.load(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(IndexFormatError, match="not JSON"):
        RAG.load(tmp_path)
    assert {k for k in before if k != str(store.relative_to(tmp_path))} <= set(snapshot(tmp_path))
    with pytest.raises(IndexFormatError):  # never overwritten either
        make().save(tmp_path)


def test_foreign_and_missing_directories(tmp_path: Path) -> None:
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"\xff\xd8\xff")
    before = snapshot(foreign)
    with pytest.raises(IndexFormatError, match="not a selfrag index"):
        RAG.load(foreign)
    with pytest.raises(IndexFormatError, match="non-empty directory"):
        RAG(path=foreign)
    with pytest.raises(IndexFormatError, match="refusing"):
        make().save(foreign)
    assert snapshot(foreign) == before
    with pytest.raises(IndexFormatError, match="no index directory"):
        RAG.load(tmp_path / "nowhere")
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text('{"format": "chroma", "format_version": 1}', encoding="utf-8")
    with pytest.raises(IndexFormatError, match="belongs to something else"):
        RAG.load(other)


def test_newer_format_version_is_refused(tmp_path: Path) -> None:
    make().save(tmp_path)
    m = manifest(tmp_path)
    m["format_version"] = persist.FORMAT_VERSION + 1
    (tmp_path / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    with pytest.raises(IndexFormatError, match="newer selfrag"):
        RAG.load(tmp_path)


def test_embedder_identity_is_checked(tmp_path: Path) -> None:
    make(embed=HashingEmbeddings(dim=64)).save(tmp_path / "dense")
    make().save(tmp_path / "lexical")
    assert isinstance(RAG.load(tmp_path / "dense").embedder, HashingEmbeddings)  # recreated from its name
    with pytest.raises(EmbedderMismatchError, match="selfrag-hashing-v1-64"):
        RAG.load(tmp_path / "dense", embed=HashingEmbeddings(dim=128))
    with pytest.raises(EmbedderMismatchError, match="without an embedder"):
        RAG.load(tmp_path / "lexical", embed="hashing")

    class Custom(HashingEmbeddings):
        pass

    custom = Custom(dim=64)
    custom.name = "my-model"
    make(embed=custom).save(tmp_path / "custom")
    with pytest.raises(EmbedderMismatchError, match="my-model"):
        RAG.load(tmp_path / "custom")  # cannot be recreated: the user must pass it
    assert RAG.load(tmp_path / "custom", embed=custom).search("Seine")[0].source == "paris"
    with pytest.raises(EmbedderMismatchError, match="my-model"):
        RAG(path=tmp_path / "custom")  # lexical-only RAG on a dense index


def test_a_second_process_sees_saved_changes_on_refresh(tmp_path: Path) -> None:
    # two objects over one directory stand for two serve workers
    writer = make(path=tmp_path)
    writer.save()
    reader = RAG.load(tmp_path)
    assert not reader.changed_on_disk() and not reader.refresh()
    writer.index("Lisbon lies where the Tagus meets the Atlantic.", source="lisbon")
    writer.save()
    assert reader.changed_on_disk()
    assert not reader.search("Tagus")  # not reloaded yet
    assert reader.refresh() and reader.count() == writer.count()
    assert reader.search("Tagus")[0].source == "lisbon"
    assert not reader.changed_on_disk()
    reader.delete("lisbon")
    reader.save()  # its own save is not a change to reload
    assert not reader.changed_on_disk() and writer.refresh()
    assert "lisbon" not in writer.sources()


def test_refresh_without_a_saved_index_does_nothing(tmp_path: Path) -> None:
    assert not RAG().changed_on_disk()
    assert not RAG(path=tmp_path / "new").refresh()


def test_large_files_are_hashed_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make().save(tmp_path)
    store = tmp_path / str(manifest(tmp_path)["data"]) / "texts.npy"
    store.write_bytes(store.read_bytes().replace(b"Paris", b"Pxris"))  # same size, same structure
    monkeypatch.setattr(persist, "VERIFY_LIMIT", store.stat().st_size - 1)  # "large" from here on
    assert RAG.load(tmp_path).count() == 3  # opened: its structure is sound
    with pytest.raises(IndexFormatError, match=r"texts\.npy is corrupt"):
        RAG.load(tmp_path, verify=True)
    monkeypatch.setattr(persist, "VERIFY_LIMIT", store.stat().st_size)  # small: always hashed
    with pytest.raises(IndexFormatError, match="corrupt"):
        RAG.load(tmp_path)
