"""Chunkers: sizes, overlap, structure metadata, validation; chunk() never indexes."""

from __future__ import annotations

import itertools

import pytest

from selfrag_core.errors import ConfigurationError
from selfrag_core.store import CHUNKERS, RAG, Chunker

PROSE = " ".join(f"Sentence number {i} talks about topic {i % 7}." for i in range(120))


@pytest.mark.parametrize("strategy", CHUNKERS)
def test_every_chunker_respects_size_and_keeps_all_words(strategy: str) -> None:
    chunks = Chunker(strategy, chunk_size=200, chunk_overlap=40).chunk(PROSE, lang="en")
    assert len(chunks) > 5
    assert all(len(c.text) <= 200 for c in chunks)
    assert all(c.metadata["lang"] == "en" for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert PROSE[c.start : c.end] == c.text
    covered = " ".join(c.text for c in chunks)
    assert all(f"number {i} " in covered for i in range(120))


def test_recursive_cuts_at_sentences_and_overlaps() -> None:
    chunks = Chunker("recursive", chunk_size=200, chunk_overlap=60).chunk(PROSE)
    assert all(c.text.endswith(".") for c in chunks)
    overlaps = [b.start < a.end for a, b in itertools.pairwise(chunks)]
    assert all(overlaps)


def test_character_windows_step_by_size_minus_overlap() -> None:
    chunks = Chunker("character", chunk_size=100, chunk_overlap=20).chunk("x" * 350)
    assert [(c.start, c.end) for c in chunks] == [(0, 100), (80, 180), (160, 260), (240, 340), (320, 350)]


def test_markdown_records_heading_path() -> None:
    text = "# Guide\nIntro text.\n## Install\nRun pip install.\n## Usage\nCall the API.\n# Other\nMore."
    chunks = Chunker("markdown", chunk_size=100, chunk_overlap=0).chunk(text)
    sections = {c.text.splitlines()[0]: c.metadata.get("section") for c in chunks}
    assert sections["## Install"] == "Guide > Install"
    assert sections["## Usage"] == "Guide > Usage"
    assert sections["# Other"] == "Other"


def test_code_splits_at_definitions() -> None:
    code = "\n".join(
        f"def function_{i}(x):\n    y = x + {i}\n    return y * 2\n" for i in range(12)
    )  # fmt: skip
    chunks = Chunker("code", chunk_size=120, chunk_overlap=0).chunk(code)
    assert all(c.text.startswith("def function_") for c in chunks)


def test_hierarchical_children_point_to_parents() -> None:
    chunks = Chunker("hierarchical", chunk_size=100, chunk_overlap=10).chunk(PROSE)
    parents = {c.metadata["parent"] for c in chunks}
    assert len(parents) > 1
    for c in chunks:
        assert c.metadata["parent_start"] <= c.start and c.end <= c.metadata["parent_end"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("words", 100, 10), "unknown chunker"),
        (("recursive", 10, 0), "chunk_size"),
        (("recursive", 100, 100), "smaller than chunk_size"),
        (("recursive", 100, -1), "chunk_overlap"),
    ],
)
def test_bad_chunker_settings_raise(args: tuple[str, int, int], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Chunker(*args)


def test_rag_chunk_does_not_index() -> None:
    rag = RAG(chunk_size=100, chunk_overlap=10)
    chunks = rag.chunk(PROSE, source_kind="demo")
    assert len(chunks) > 3 and chunks[0].metadata == {"source_kind": "demo"}
    assert rag.count() == 0
    with pytest.raises(ValueError, match="empty"):
        rag.chunk("   ")
