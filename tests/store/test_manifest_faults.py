"""A damaged, foreign or hostile index directory: every fault is an ``IndexFormatError``
naming the problem, raised before any file outside the index is touched; never an
exception from ``json`` or ``numpy``, never an ``AttributeError``."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from old_index import copy_old_index

from selfrag_core.store import RAG, IndexFormatError, persist

DOCS = {
    "paris": "Paris is the capital of France. The city lies on the river Seine.",
    "berlin": "Berlin is the capital of Germany and its largest city.",
    "cairo": "تقع مدينة القاهرة على ضفاف نهر النيل",
}

Json = Any


FORMAT2 = Path(__file__).parent / "data" / "format2" / "hybrid"  # the same DOCS, saved by format 2


def build(root: Path, embed: str | None = "hashing") -> Path:
    rag = RAG(embed)
    for source, text in DOCS.items():
        rag.index(text, source=source)
    rag.save(root)
    return root


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return build(tmp_path / "idx")


@pytest.fixture
def format2(tmp_path: Path) -> Path:
    """An index of the previous format, whose chunks and sources are JSON records (store.json)."""
    root = tmp_path / "format2"
    copy_old_index(FORMAT2, root)
    assert read_manifest(root)["format_version"] == 2
    return root


def read_manifest(root: Path) -> dict[str, Json]:
    data: dict[str, Json] = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    return data


def write_manifest(root: Path, manifest: Json) -> None:
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def data_file(root: Path, name: str) -> Path:
    return root / str(read_manifest(root)["data"]) / name


def replace_data(root: Path, name: str, content: bytes) -> None:
    """Rewrite a data file and record its new checksum, so the checks behind the checksum run."""
    data_file(root, name).write_bytes(content)
    manifest = read_manifest(root)
    manifest["files"][name] = persist._sha256(data_file(root, name))
    write_manifest(root, manifest)


def npy_bytes(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def load_fails(root: Path, match: str) -> IndexFormatError:
    with pytest.raises(IndexFormatError, match=match) as info:
        RAG.load(root)
    return info.value


# ----------------------------------------------------------------------------- the manifest


def _set(key: str, value: Json) -> Callable[[dict[str, Json]], None]:
    def mutate(m: dict[str, Json]) -> None:
        m[key] = value

    return mutate


def _set_in(key: str, sub: str, value: Json) -> Callable[[dict[str, Json]], None]:
    def mutate(m: dict[str, Json]) -> None:
        m[key][sub] = value

    return mutate


def _rename_file(old: str, new: str) -> Callable[[dict[str, Json]], None]:
    def mutate(m: dict[str, Json]) -> None:
        m["files"][new] = m["files"].pop(old)

    return mutate


def _drop(key: str) -> Callable[[dict[str, Json]], None]:
    def mutate(m: dict[str, Json]) -> None:
        del m[key]

    return mutate


PLAIN = "plain file name"
MANIFEST_FAULTS: dict[str, tuple[Callable[[dict[str, Json]], None], str]] = {
    "embedder as a string": (_set("embedder", "minilm"), "embedder is 'minilm'"),
    "embedder as a list": (_set("embedder", ["minilm", 256]), "embedder is"),
    "embedder without dim": (_set("embedder", {"name": "minilm"}), r"embedder lacks the fields \['dim'\]"),
    "embedder name a number": (_set_in("embedder", "name", 7), "embedder.name is 7"),
    "embedder dim a string": (_set_in("embedder", "dim", "256"), "embedder.dim is '256'"),
    "embedder dim a bool": (_set_in("embedder", "dim", True), "embedder.dim is True"),
    "embedder dim zero": (_set_in("embedder", "dim", 0), "embedder.dim is 0"),
    "format_version true": (_set("format_version", True), "format_version is True"),
    "format_version a string": (_set("format_version", "1"), "format_version is '1'"),
    "format_version a float": (_set("format_version", 1.0), "format_version is 1.0"),
    "format_version zero": (_set("format_version", 0), "format_version is 0"),
    "format_version 999": (_set("format_version", 999), "newer selfrag"),
    "file name ../outside.npy": (_rename_file("vectors.npy", "../outside.npy"), PLAIN),
    "file name sub/x.npy": (_rename_file("vectors.npy", "sub/x.npy"), PLAIN),
    "file name sub\\x.npy": (_rename_file("vectors.npy", "sub\\x.npy"), PLAIN),
    "file name absolute": (_rename_file("vectors.npy", "/etc/passwd"), PLAIN),
    "file name drive": (_rename_file("vectors.npy", "C:x.npy"), PLAIN),
    "file name empty": (_rename_file("vectors.npy", ""), PLAIN),
    "file name dot": (_rename_file("vectors.npy", "."), PLAIN),
    "file name with NUL": (_rename_file("vectors.npy", "vectors.npy\x00"), PLAIN),
    "file name unknown": (_rename_file("vectors.npy", "extra.bin"), r"one of \['store.json', 'ids.npy'"),
    "a column not listed": (lambda m: m["files"].pop("texts.npy"), r"all of \['store.json', 'ids.npy'"),
    "term frequencies in format 3": (  # format 3 saved scores (bm25_data.npy)
        _set("format_version", 3),
        r"a name in files is 'bm25_lengths.npy', expected one of",
    ),
    "vectors not listed": (lambda m: m["files"].pop("vectors.npy"), "vectors.npy listed exactly when"),
    "a BM25 array not listed": (lambda m: m["files"].pop("bm25_tf.npy"), r"all of \['bm25.json'"),
    "BM25 files without a tokenizer": (_set("tokenizer", None), "none without a tokenizer"),
    "BM25 files in format 1": (_set("format_version", 1), r"a name in files is 'bm25.json', expected one of"),
    "data ..": (_set("data", ".."), PLAIN),
    "data with a separator": (_set("data", "data-1/../.."), PLAIN),
    "data absolute": (_set("data", "/tmp"), PLAIN),
    "data not a data directory": (_set("data", "photos"), r"data-\.\.\."),
    "data a number": (_set("data", 3), "data is 3"),
    "files a list": (_set("files", ["store.json"]), "files is"),
    "files without store.json": (_set("files", {}), "files is"),
    "checksum a number": (_set_in("files", "store.json", 5), "SHA-256"),
    "chunks negative": (_set("chunks", -1), "chunks is -1"),
    "chunks a string": (_set("chunks", "3"), "chunks is '3'"),
    "chunks a bool": (_set("chunks", True), "chunks is True"),
    "settings missing": (_drop("settings"), r"lacks the fields \['settings'\]"),
    "an unknown field": (_set("shards", 4), r"has unknown fields \['shards'\]"),
    "settings a list": (_set("settings", []), "settings is"),
    "tokenizer a number": (_set("tokenizer", 5), "tokenizer is 5"),
    "chunk_size a string": (_set_in("settings", "chunk_size", "big"), "settings.chunk_size is 'big'"),
    "chunk_size too small": (_set_in("settings", "chunk_size", 5), "settings are invalid"),
    "bm25_alpha out of range": (_set_in("settings", "bm25_alpha", 2), "settings.bm25_alpha is 2"),
    "bm25_alpha a bool": (_set_in("settings", "bm25_alpha", True), "settings.bm25_alpha is True"),
    "stemmer unknown": (_set_in("settings", "stemmer", "porter"), "settings.stemmer"),
    "chunker unknown": (_set_in("settings", "chunker", "magic"), "settings.chunker"),
    "reranker unknown": (_set_in("settings", "reranker", "magic"), "settings are invalid"),
    "settings unknown key": (_set_in("settings", "temperature", 0.2), "has unknown fields"),
}


@pytest.mark.parametrize("fault", list(MANIFEST_FAULTS))
def test_a_malformed_manifest_is_named(index: Path, fault: str) -> None:
    mutate, match = MANIFEST_FAULTS[fault]
    manifest = read_manifest(index)
    mutate(manifest)
    write_manifest(index, manifest)
    error = load_fails(index, match)
    assert "manifest.json" in str(error) or "newer selfrag" in str(error)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b'{"format": "selfrag-store", "format_vers', "not JSON"),
        (b"", "not JSON"),
        (b'["selfrag-store", 1]', "not a JSON object"),
        (b'"selfrag-store"', "not a JSON object"),
        (b'{"format": "selfrag-store", "format_version": 1, "data": "\xff\xfe"}', "not JSON"),
        (b"[" * 100_000, "not JSON"),  # RecursionError in json
        (b'{"format": "selfrag-store", "format_version": 1' + b"0" * 5000 + b"}", "not JSON"),  # int limit
    ],
    ids=["truncated", "empty", "a list", "a string", "not UTF-8", "nested too deep", "huge integer"],
)
def test_an_unreadable_manifest_is_named(index: Path, content: bytes, match: str) -> None:
    (index / "manifest.json").write_bytes(content)
    load_fails(index, match)


def test_a_lexical_index_cannot_claim_dense_weights(tmp_path: Path) -> None:
    root = build(tmp_path / "lexical", embed=None)
    manifest = read_manifest(root)
    manifest["settings"]["bm25_alpha"] = 0.5
    write_manifest(root, manifest)
    load_fails(root, "without an embedder")


def test_an_impossible_hashing_embedder_name_is_named(index: Path) -> None:
    manifest = read_manifest(index)
    manifest["embedder"]["name"] = "selfrag-hashing-v1-2-43"
    write_manifest(index, manifest)
    load_fails(index, "cannot exist")


# ----------------------------------------------------------------------------- outside the index


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Every path opened through ``io.open`` (``Path.open``, ``read_text``) or hashed."""
    paths: list[Path] = []
    real_open, real_sha = io.open, persist._sha256

    def spy_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        paths.append(Path(os.fsdecode(file)) if isinstance(file, (str, bytes, os.PathLike)) else Path("?"))
        return real_open(file, *args, **kwargs)

    def spy_sha(path: Path) -> str:
        paths.append(path)
        return real_sha(path)

    monkeypatch.setattr(io, "open", spy_open)
    monkeypatch.setattr(persist, "_sha256", spy_sha)
    yield paths


@pytest.mark.parametrize("name", ["../../outside.npy", "../outside.npy"])
def test_a_file_outside_the_index_is_never_opened(
    tmp_path: Path, index: Path, opened: list[Path], name: str
) -> None:
    outside = (index / str(read_manifest(index)["data"]) / name).resolve()
    outside.write_bytes(npy_bytes(np.zeros((3, 256), np.float32)))
    manifest = read_manifest(index)
    manifest["files"] = {"store.json": manifest["files"]["store.json"], name: persist._sha256(outside)}
    write_manifest(index, manifest)
    opened.clear()
    load_fails(index, f"a name in files is '{name}'")
    assert outside not in [p.resolve() for p in opened]
    assert all(p.resolve().is_relative_to(index.resolve()) for p in opened)


@pytest.mark.parametrize("linked", ["the data directory", "vectors.npy"])
def test_a_link_out_of_the_index_is_refused(tmp_path: Path, index: Path, linked: str) -> None:
    data = index / str(read_manifest(index)["data"])
    link = data if linked == "the data directory" else data / "vectors.npy"
    elsewhere = tmp_path / "elsewhere"
    link.rename(elsewhere)
    try:
        link.symlink_to(elsewhere, target_is_directory=link.name != "vectors.npy")
    except OSError:  # pragma: no cover - no symlinks here (Windows without the privilege)
        pytest.skip("cannot create symlinks")
    load_fails(index, "points outside the index")


# ----------------------------------------------------------------------------- the data files


def _store(mutate: Callable[[dict[str, Json]], None]) -> Callable[[bytes], bytes]:
    def rewrite(content: bytes) -> bytes:
        raw = json.loads(content)
        mutate(raw)
        return json.dumps(raw).encode("utf-8")

    return rewrite


def _chunk(key: str, value: Json) -> Callable[[dict[str, Json]], None]:
    def mutate(raw: dict[str, Json]) -> None:
        raw["chunks"][0][key] = value

    return mutate


def _params(mutate: Callable[[dict[str, Json]], None]) -> Callable[[bytes], bytes]:
    return _store(mutate)


def _array(name: str, change: Callable[[np.ndarray], np.ndarray]) -> Callable[[bytes], bytes]:
    def rewrite(content: bytes) -> bytes:
        return npy_bytes(change(np.load(io.BytesIO(content), allow_pickle=False)))

    return rewrite


def _poke(at: int, value: Any) -> Callable[[np.ndarray], np.ndarray]:
    def change(array: np.ndarray) -> np.ndarray:
        array = array.copy()
        array[at] = value
        return array

    return change


STORE_FAULTS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "truncated": (lambda b: b[: len(b) // 2], "not JSON"),
    "not UTF-8": (lambda b: b.replace(b"Paris", b"P\xffris"), "not JSON"),
    "a list": (lambda b: b"[]", "the store is"),
    "chunk text a number": (_store(_chunk("text", 42)), r"chunks\[0\]\.text is 42"),
    "chunk id null": (_store(_chunk("id", None)), r"chunks\[0\]\.id is None"),
    "chunk metadata a list": (_store(_chunk("metadata", [])), r"chunks\[0\]\.metadata is \[\]"),
    "chunk a string": (_store(lambda r: r["chunks"].__setitem__(0, "Paris")), r"chunks\[0\] is 'Paris'"),
    "chunk without source": (
        _store(lambda r: r["chunks"][0].pop("source")),
        r"lacks the fields \['source'\]",
    ),
    "chunk of an unlisted source": (_store(_chunk("source", "rome")), r"chunks\[0\]\.source is 'rome'"),
    "a chunk fewer": (_store(lambda r: r["chunks"].pop()), "holds 2 chunks but the manifest counts 3"),
    "chunks an object": (_store(lambda r: r.__setitem__("chunks", {})), "chunks is {}"),
    "source checksum a number": (_store(lambda r: r["sources"].__setitem__("paris", 1)), "sources is"),
}


@pytest.mark.parametrize("fault", list(STORE_FAULTS))
def test_a_malformed_store_of_format_2_is_named(format2: Path, fault: str) -> None:
    rewrite, match = STORE_FAULTS[fault]
    replace_data(format2, "store.json", rewrite(data_file(format2, "store.json").read_bytes()))
    assert "store.json" in str(load_fails(format2, match))


def _strings(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    column = persist.StringColumn.of(strings)
    return column.blob, column.offsets


def replace_strings(root: Path, name: str, strings: list[str]) -> None:
    """Rewrite a string column (blob and offsets, consistent), with their checksums."""
    blob, offsets = _strings(strings)
    replace_data(root, f"{name}.npy", npy_bytes(blob))
    replace_data(root, f"{name}_offsets.npy", npy_bytes(offsets))


COLUMN_FAULTS: dict[str, tuple[str, Callable[[bytes], bytes], str]] = {
    "catalogue truncated": ("store.json", lambda b: b[: len(b) // 2], "not JSON"),
    "catalogue a list": ("store.json", lambda b: b"[]", "the store is"),
    "catalogue with an unknown field": (
        "store.json",
        _store(lambda r: r.__setitem__("x", 1)),
        "unknown fields",
    ),
    "source count a string": ("store.json", lambda b: b'{"sources": "3"}', "sources is '3'"),
    "source count negative": ("store.json", lambda b: b'{"sources": -1}', "sources is -1"),
    "a source fewer counted": ("store.json", lambda b: b'{"sources": 2}', r"sources_offsets.npy .*shape"),
    "texts truncated": ("texts.npy", lambda b: b[:-3], "truncated"),
    "texts padded": ("texts.npy", lambda b: b + b"\0" * 8, "bytes its header announces"),
    "texts as int8": ("texts.npy", _array("texts", lambda a: a.astype(np.int8)), "dtype int8"),
    "texts in two dimensions": ("texts.npy", _array("texts", lambda a: a.reshape(1, -1)), "shape"),
    "texts pickled": (
        "texts.npy",
        lambda b: npy_bytes(np.array([{"a": 1}], dtype=object), allow_pickle=True),
        "dtype object",
    ),
    "texts a pickle": ("texts.npy", lambda b: b"\x80\x04K\x01.", "not a numeric array"),
    "text offsets not from 0": ("texts_offsets.npy", _array("o", _poke(0, 1)), "not ascending from 0"),
    "text offsets descending": ("texts_offsets.npy", _array("o", _poke(1, -5)), "not ascending from 0"),
    "text offsets short of the end": (
        "texts_offsets.npy",
        _array("o", lambda a: _poke(-1, a[-1] - 1)(a)),
        "to the .* bytes of texts.npy",
    ),
    "text offsets past the end": ("texts_offsets.npy", _array("o", _poke(-1, 10**6)), "not ascending"),
    "an id offset fewer": ("ids_offsets.npy", _array("o", lambda a: a[:-1]), r"shape \(3,\)"),
    "metadata offsets as int32": (
        "metadata_offsets.npy",
        _array("o", lambda a: a.astype(np.int32)),
        "dtype int32",
    ),
    "checksum offsets truncated": ("checksums_offsets.npy", lambda b: b[:-1], "truncated"),
    "a source position past the sources": (
        "chunk_sources.npy",
        _array("c", _poke(0, 3)),
        "outside the 3 sources",
    ),
    "a negative source position": ("chunk_sources.npy", _array("c", _poke(-1, -1)), "outside the 3 sources"),
    "source positions as int64": ("chunk_sources.npy", _array("c", lambda a: a.astype(np.int64)), "int64"),
    "a source position fewer": ("chunk_sources.npy", _array("c", lambda a: a[:-1]), r"shape \(2,\)"),
}


@pytest.mark.parametrize("fault", list(COLUMN_FAULTS))
def test_a_malformed_column_is_named(index: Path, fault: str) -> None:
    name, rewrite, match = COLUMN_FAULTS[fault]
    replace_data(index, name, rewrite(data_file(index, name).read_bytes()))
    load_fails(index, match)


def test_a_record_is_checked_when_it_is_read(index: Path) -> None:
    """What only reading a record shows (its UTF-8, its metadata's JSON, distinct source
    names) is an IndexFormatError naming it when it is read, never at the load."""
    texts = np.load(data_file(index, "texts.npy"), allow_pickle=False).copy()
    texts[0] = 0xFF  # the first byte of "Paris is the capital..."
    replace_data(index, "texts.npy", npy_bytes(texts))
    rag = RAG.load(index)
    assert rag.count() == 3 and [h.source for h in rag.search("Berlin Germany", top_k=1)] == ["berlin"]
    with pytest.raises(IndexFormatError, match=r"texts.npy: string 0 is not UTF-8"):
        rag.search("river Seine")
    for strings, match in (
        (["[]", "{}", "{}"], r"chunks\[0\]\.metadata is \[\]"),
        (['{"a": ', "{}", "{}"], "chunk 0's metadata is not JSON"),
    ):
        replace_strings(index, "metadata", strings)
        rag = RAG.load(index)
        with pytest.raises(IndexFormatError, match=match):
            rag.search("Paris", part=1)  # a metadata filter reads every chunk's
    replace_strings(index, "metadata", ["{}", "{}", "{}"])
    replace_strings(index, "sources", ["paris", "paris", "cairo"])
    rag = RAG.load(index)
    with pytest.raises(IndexFormatError, match="names a source twice"):
        rag.sources()
    with pytest.raises(IndexFormatError, match="names a source twice"):
        rag.index("Tokyo is the capital of Japan.", source="tokyo")


ROWS, DIM = 3, 256
VECTOR_FAULTS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "truncated data": (lambda b: b[:-100], "truncated"),
    "truncated header": (lambda b: b[:20], "not a numeric array"),
    "empty": (lambda b: b"", "not a numeric array"),
    "padded": (lambda b: b + b"\0" * 8, "bytes its header announces"),
    "an object array (pickle)": (
        lambda b: npy_bytes(np.array([{"a": 1}] * ROWS, dtype=object), allow_pickle=True),
        "dtype object",
    ),
    "float64": (lambda b: npy_bytes(np.zeros((ROWS, DIM))), "dtype float64"),
    "integers": (lambda b: npy_bytes(np.zeros((ROWS, DIM), np.int32)), "dtype int32"),
    "a row fewer": (lambda b: npy_bytes(np.zeros((ROWS - 1, DIM), np.float32)), r"shape \(2, 256\)"),
    "other dimension": (lambda b: npy_bytes(np.zeros((ROWS, 64), np.float32)), r"shape \(3, 64\)"),
    "one dimension": (lambda b: npy_bytes(np.zeros(ROWS * DIM, np.float32)), r"shape \(768,\)"),
    "NaN": (lambda b: npy_bytes(np.full((ROWS, DIM), np.nan, np.float32)), "NaN"),
    "a zip (npz)": (
        lambda b: (lambda buf: (np.savez(buf, v=np.zeros((ROWS, DIM), np.float32)), buf.getvalue())[1])(
            io.BytesIO()
        ),
        "not a numeric array",
    ),
    "a pickle": (lambda b: b"\x80\x04K\x01.", "not a numeric array"),
}


@pytest.mark.parametrize("fault", list(VECTOR_FAULTS))
def test_malformed_vectors_are_named(index: Path, fault: str) -> None:
    rewrite, match = VECTOR_FAULTS[fault]
    replace_data(index, "vectors.npy", rewrite(data_file(index, "vectors.npy").read_bytes()))
    assert "vectors.npy" in str(load_fails(index, match))


def test_vectors_in_fortran_order_or_big_endian_still_load(index: Path) -> None:
    before = RAG.load(index).search("river Seine")
    vectors = np.load(data_file(index, "vectors.npy"))
    replace_data(index, "vectors.npy", npy_bytes(np.asfortranarray(vectors.astype(">f4"))))
    assert [h.id for h in RAG.load(index).search("river Seine")] == [h.id for h in before]


BM25_FAULTS: dict[str, tuple[str, Callable[[bytes], bytes], str]] = {
    "params truncated": ("bm25.json", lambda b: b[: len(b) // 2], "not JSON"),
    "params a list": ("bm25.json", lambda b: b"[]", "the BM25 parameters is"),
    "params with an unknown field": ("bm25.json", _params(lambda p: p.__setitem__("x", 1)), "unknown fields"),
    "k1 a string": ("bm25.json", _params(lambda p: p.__setitem__("k1", "1.5")), "k1 is '1.5'"),
    "b negative": ("bm25.json", _params(lambda p: p.__setitem__("b", -1)), "b is -1"),
    "b a bool": ("bm25.json", _params(lambda p: p.__setitem__("b", True)), "b is True"),
    "terms a string": ("bm25.json", _params(lambda p: p.__setitem__("terms", "paris")), "terms is 'paris'"),
    "a term a number": ("bm25.json", _params(lambda p: p["terms"].__setitem__(0, 7)), "a list of strings"),
    "a term twice": ("bm25.json", _params(lambda p: p["terms"].__setitem__(1, p["terms"][0])), "distinct"),
    "a term fewer": ("bm25.json", _params(lambda p: p["terms"].pop()), r"bm25_indptr.npy .*shape"),
    "offsets not from 0": ("bm25_indptr.npy", _array("indptr", _poke(0, 1)), "not ascending from 0"),
    "offsets descending": ("bm25_indptr.npy", _array("indptr", _poke(1, -5)), "not ascending from 0"),
    "offsets as floats": ("bm25_indptr.npy", _array("indptr", lambda a: a.astype(float)), "dtype float64"),
    "offsets past the data": (
        "bm25_indptr.npy",
        _array("indptr", _poke(-1, 10**6)),
        r"bm25_tf.npy .*shape",
    ),
    "a position past the chunks": (
        "bm25_indices.npy",
        _array("indices", _poke(0, 3)),
        "outside the 3 chunks",
    ),
    "a negative position": ("bm25_indices.npy", _array("indices", _poke(-1, -1)), "outside the 3 chunks"),
    "positions as int64": (
        "bm25_indices.npy",
        _array("indices", lambda a: a.astype(np.int64)),
        "dtype int64",
    ),
    "a position fewer": ("bm25_indices.npy", _array("indices", lambda a: a[:-1]), "shape"),
    "a NaN frequency": ("bm25_tf.npy", _array("tf", _poke(0, np.nan)), "NaN"),
    "a frequency of 0": ("bm25_tf.npy", _array("tf", _poke(0, 0)), "below 1"),
    "frequencies truncated": ("bm25_tf.npy", lambda b: b[:-3], "truncated"),
    "a length fewer": ("bm25_lengths.npy", _array("lengths", lambda a: a[:-1]), "shape"),
    "a negative length": ("bm25_lengths.npy", _array("lengths", _poke(0, -1)), "negative"),
    "frequencies pickled": (
        "bm25_tf.npy",
        lambda b: npy_bytes(np.array([{"a": 1}], dtype=object), allow_pickle=True),
        "dtype object",
    ),
}


@pytest.mark.parametrize("fault", list(BM25_FAULTS))
def test_a_malformed_bm25_index_is_named(index: Path, fault: str) -> None:
    name, rewrite, match = BM25_FAULTS[fault]
    replace_data(index, name, rewrite(data_file(index, name).read_bytes()))
    load_fails(index, match)


def test_bm25_arrays_in_another_byte_order_still_load(index: Path) -> None:
    before = RAG.load(index).search("river Seine")
    for name in ("bm25_tf.npy", "bm25_indices.npy", "bm25_indptr.npy", "bm25_lengths.npy"):
        array = np.load(data_file(index, name), allow_pickle=False)
        replace_data(index, name, npy_bytes(array.astype(array.dtype.newbyteorder(">"))))
    after = RAG.load(index).search("river Seine")
    assert [(h.id, h.score) for h in after] == [(h.id, h.score) for h in before]


@pytest.mark.parametrize(
    "name", ["store.json", "texts.npy", "chunk_sources.npy", "vectors.npy", "bm25.json", "bm25_indptr.npy"]
)
def test_a_missing_referenced_file_is_named(index: Path, name: str) -> None:
    data_file(index, name).unlink()
    load_fails(index, f"{name} is missing")


def test_a_missing_data_directory_is_named(index: Path) -> None:
    manifest = read_manifest(index)
    manifest["data"] = "data-0123"
    write_manifest(index, manifest)
    load_fails(index, "data-0123/.* is missing")


# ----------------------------------------------------------------------------- the whole class


def _leaves(value: Json, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            yield from _leaves(item, (*path, i))
    if path:
        yield path


def _replaced(value: Json, path: tuple[Any, ...], new: Json) -> Json:
    copy = json.loads(json.dumps(value))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return copy


WRONG = [None, True, 0, -1, 1.5, "", "x", "../x", [], {}, [1], {"a": 1}]


def _only_index_format_errors(root: Path) -> None:
    with contextlib.suppress(IndexFormatError):
        RAG.load(root)


def test_every_field_of_the_manifest_replaced_by_anything(index: Path) -> None:
    """Each field (at every depth) set to each wrong-typed value: loads or IndexFormatError."""
    original = read_manifest(index)
    for path in _leaves(original):
        for wrong in WRONG:
            write_manifest(index, _replaced(original, path, wrong))
            _only_index_format_errors(index)


@pytest.mark.parametrize("version", [2, 3])
def test_every_field_of_the_store_replaced_by_anything(index: Path, format2: Path, version: int) -> None:
    root = format2 if version == 2 else index
    original = json.loads(data_file(root, "store.json").read_bytes())
    paths = [p for p in _leaves(original) if not (len(p) > 1 and p[0] == "chunks" and p[1] > 0)]
    assert paths
    for path in paths:
        for wrong in WRONG:
            replace_data(root, "store.json", json.dumps(_replaced(original, path, wrong)).encode())
            _only_index_format_errors(root)


@pytest.mark.parametrize(
    "name",
    [
        "manifest.json",
        "store.json",
        *persist.COLUMN_FILES,
        "vectors.npy",
        "bm25.json",
        "bm25_tf.npy",
        "bm25_indices.npy",
        "bm25_indptr.npy",
        "bm25_lengths.npy",
    ],
)
def test_every_truncation_is_an_index_format_error(index: Path, name: str) -> None:
    path = index / name if name == "manifest.json" else data_file(index, name)
    content = path.read_bytes()
    for size in range(0, len(content), max(1, len(content) // 60)):
        if name == "manifest.json":
            path.write_bytes(content[:size])
        else:
            replace_data(index, name, content[:size])
        with pytest.raises(IndexFormatError):
            RAG.load(index)
        path.write_bytes(content)  # the manifest's checksum is restored by the next replace_data


def test_refresh_onto_a_corrupt_index_keeps_the_loaded_one(index: Path) -> None:
    reader = RAG.load(index)
    manifest = read_manifest(index)
    manifest["embedder"] = "minilm"
    write_manifest(index, manifest)
    assert reader.changed_on_disk()
    with pytest.raises(IndexFormatError, match="embedder is 'minilm'"):
        reader.refresh()
    assert reader.count() == 3 and reader.search("Seine")[0].source == "paris"
    with pytest.raises(IndexFormatError, match="embedder is 'minilm'"):
        RAG("hashing", path=index)


# ----------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        (lambda m: m.__setitem__("embedder", "minilm"), "embedder is 'minilm'"),
        (lambda m: m.__setitem__("format_version", True), "format_version is True"),
        (
            lambda m: m["files"].__setitem__("../../outside.npy", "0" * 64),
            "a name in files is '../../outside.npy'",
        ),
    ],
    ids=["embedder a string", "format_version true", "a file outside"],
)
@pytest.mark.parametrize("command", [["stats"], ["ask", "Where is Paris?", "--llm", "fake"]])
def test_the_cli_prints_one_error_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fault: Callable[[dict[str, Json]], None],
    problem: str,
    command: list[str],
) -> None:
    pytest.importorskip("bm25s")
    from selfrag_core import cli

    root = build(tmp_path / "idx")
    manifest = read_manifest(root)
    fault(manifest)
    write_manifest(root, manifest)
    capsys.readouterr()
    code = cli.main([*command, "--index", str(root)])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and out == ""
    assert len(lines) == 1 and lines[0].startswith("selfrag: error:"), err
    assert problem in lines[0] and "re-index" in lines[0]
