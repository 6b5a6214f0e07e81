"""Issue 52: a question that names a numbered document ("What does PEP 572 introduce?",
a ticket, an error code, a version, a section) retrieves it first, among documents that
mention the same number and others; identifiers are the same terms however they are
written; an index saved before identifier terms is searched as it was, and upgraded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import cli
from selfrag_core.store import RAG, Tokenizer
from selfrag_core.store.lexical import file_name

pytest.importorskip("bm25s")

#: numbered documents (each under a file name holding its number) and distractors that
#: mention the same numbers, more often, beside others
DOCS = {
    "peps/pep-0572.rst": "PEP: 572\nTitle: Assignment Expressions\nStatus: Final\n\n"
    "This is a proposal for creating a way to assign to variables within an expression "
    "using the notation NAME := expr.",
    "peps/pep-0577.rst": "PEP: 577\nTitle: Augmented Assignment Expressions\n\n"
    "This PEP is a direct competitor to PEP 572. The difference this introduces relative to "
    "PEP 572 is that PEP 572 introduces a new target. One of the challenges with PEP 572 is scoping.",
    "peps/pep-0008.rst": "PEP: 8\nTitle: Style Guide for Python Code\n\n"
    "This document gives coding conventions for the Python code in the standard library.",
    "peps/pep-3108.rst": "PEP: 3108\nTitle: Standard Library Reorganization\n\n"
    "PEP 8 violations: PEP 8 specifies that modules have short, all-lowercase names, and "
    "PEP 8 names were applied where modules broke PEP 8.",
    "tickets/TICKET-1234.md": "Ticket 1234\n\nLogin fails after a password reset: the session "
    "token is not renewed.",
    "tickets/TICKET-1243.md": "Ticket 1243\n\nSame symptom as ticket #1234 and ticket #1234b; "
    "see ticket #1234 and ticket #1235. Ticket #1234 was about login, ticket #1243 is about logout.",
    "lint/E501.md": "E501\n\nLine too long: a line is longer than the configured maximum of 79 characters.",
    "lint/W291.md": "W291\n\nTrailing whitespace. Unlike E501 and E502, W291 is fixed by "
    "the formatter; E501 needs a manual split, E501 is about length.",
    "releases/v2.3.1.md": "Release 2.3.1\n\nFixes the cache eviction when the disk is full.",
    "releases/v2.3.0.md": "Release 2.3.0\n\nAdds the disk cache. Upgrade to 2.3.1 for the "
    "eviction fix: 2.3.1 is the release to use, 2.3.1 fixes it, 2.4.0 follows.",
    "spec/section-4.2.md": "4.2 Retries\n\nA failed request is sent again after a pause that doubles.",
    "spec/section-4.1.md": "4.1 Timeouts\n\nEach request has a deadline; see 4.2 for what follows "
    "a failure, 4.2 retries, 4.2 again and 4.3.",
    "notes/python-build-info-v1.0.json": '{"python": "python", "base_prefix": "python", "version": "3"}',
    "notes/zen.md": "The Zen of Python\n\nBeautiful is better than ugly. Explicit is better than implicit.",
}
#: (question, the file it names)
QUESTIONS = [
    ("What does PEP 572 introduce?", "peps/pep-0572.rst"),
    ("What is PEP 8?", "peps/pep-0008.rst"),
    ("What is PEP-0572 about?", "peps/pep-0572.rst"),
    ("What is ticket #1234 about?", "tickets/TICKET-1234.md"),
    ("Why does TICKET-1234 happen?", "tickets/TICKET-1234.md"),
    ("What does E501 mean?", "lint/E501.md"),
    ("What is error E-501?", "lint/E501.md"),
    ("What did v2.3.1 fix?", "releases/v2.3.1.md"),
    ("What changed in release 2.3.1?", "releases/v2.3.1.md"),
    ("What does section 4.2 say?", "spec/section-4.2.md"),
]


def build(embed: Any = None, *, sources: dict[str, str] | None = None) -> RAG:
    rag = RAG(embed, chunk_size=400, chunk_overlap=0)
    rag.index_many([{"text": text, "source": source} for source, text in (sources or DOCS).items()])
    return rag


@pytest.mark.parametrize("embed", [None, "hashing"], ids=["lexical", "hybrid"])
def test_a_question_naming_a_numbered_document_retrieves_it_first(embed: Any) -> None:
    rag = build(embed)
    for question, source in QUESTIONS:
        hits = rag.search(question, top_k=5)
        assert hits and hits[0].source == source, (question, [h.source for h in hits])


@pytest.mark.parametrize("embed", [None, "hashing"], ids=["lexical", "hybrid"])
def test_a_file_names_words_do_not_outrank_the_text(embed: Any) -> None:
    """Only the identifiers of a file name are searched: "python" in one does not beat a
    passage on Python."""
    hits = build(embed).search("What is the Zen of Python?", top_k=3)
    assert hits[0].source == "notes/zen.md"


def test_without_file_names_a_numbered_document_is_found_by_its_identifier() -> None:
    """Sources that are ids, not file names: the header's identifier ("PEP: 572", written
    apart) is the question's ("PEP 572"), and outranks a mere word in common."""
    docs = {
        "a": "PEP: 572\nTitle: Assignment Expressions\n\nAssign to variables within an expression.",
        "b": "PEP 8 introduces naming rules; it introduces them for the standard library.",
        "c": "Release 2.3.1\n\nFixes the cache.",
        "d": "Release 2.4.0 follows release 2.3.0 and introduces a cache.",
    }
    rag = build(sources=docs)
    assert rag.search("What does PEP-572 introduce?", top_k=2)[0].source == "a"
    assert rag.search("What did version 2.3.1 fix?", top_k=2)[0].source == "c"


@pytest.mark.parametrize(
    ("written", "term"),
    [
        (["PEP 572", "PEP-572", "PEP: 572", ":pep:`572`", "PEP572", "PEP-0572", "pep0572"], "pep572"),
        (["PEP 8", "PEP-8", "PEP: 8", "PEP8", "pep-0008"], "pep8"),
        (["E501", "E-501", "E 501"], "e501"),
        (["ticket #1234", "ticket 1234", "ticket-1234", "TICKET1234"], "ticket1234"),
        (["v2.3.1", "2.3.1", "version 2.3.1."], "2.3.1"),
        (["Python 3.8", "3.8", "(3.8)"], "3.8"),
        (["section 4.2.1", "4.2.1"], "4.2.1"),
    ],
)
def test_an_identifier_is_one_term_however_it_is_written(written: list[str], term: str) -> None:
    tokenize = Tokenizer()
    for text in written:
        assert term in tokenize(text), (text, tokenize(text))
        assert term in tokenize.query(f"What is {text}?")


def test_a_number_is_not_glued_to_what_is_not_its_word() -> None:
    tokenize = Tokenizer()
    assert tokenize("in 2019 the IL-6 level of 5mg") == ["2019", "il", "level", "5mg", "il6"]
    assert tokenize("h1n1 5 and a 3") == ["h1n1"]  # no word before the 5, a stopword before the 3


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("/home/me/peps/pep-0572.rst", "pep-0572"),
        ("pep-0572.rst", "pep-0572"),
        ("C:\\notes\\TICKET-1234.md", "TICKET-1234"),
        ("https://docs.python.org/3/whatsnew/3.8.html", "3.8"),
        ("4983", None),  # an id
        ("web:italy", None),
        ("doc-0123456789abcdef", None),  # a content source
    ],
)
def test_the_file_name_of_a_source(source: str, name: str | None) -> None:
    assert file_name(source) == name


def test_sources_that_are_ids_get_no_file_name_terms() -> None:
    """SciFact's sources are numbers: they are not searched as names."""
    rag = build(sources={"572": "An abstract on vitamins.", "9": "An abstract on PEP 572 and vitamins."})
    assert [h.source for h in rag.search("PEP 572 vitamins", top_k=2)] == ["9", "572"]


def _legacy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokenise as selfrag did before identifier terms: words only, identity the stemming."""
    plain = Tokenizer.__call__

    def words(self: Tokenizer, text: str) -> list[str]:
        return [t for t in plain(self, text) if t.isalnum() and not (t.isdigit() and t.startswith("0"))]

    monkeypatch.setattr(Tokenizer, "identity", property(lambda self: self.stemming))
    monkeypatch.setattr(Tokenizer, "document", lambda self, text, source=None: words(self, text))
    monkeypatch.setattr(Tokenizer, "query", words)
    monkeypatch.setattr(Tokenizer, "_identifiers", lambda self, folded: [])


def test_an_index_saved_before_identifier_terms_is_searched_as_it_is_then_upgraded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        _legacy(m)
        build().save(tmp_path)
        before = [h.source for h in RAG.load(tmp_path).search("What does PEP 572 introduce?", top_k=3)]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert "+" not in manifest["tokenizer"]  # the stemming alone: an older selfrag's
    old = RAG.load(tmp_path)
    assert old.search("What does PEP 572 introduce?", top_k=3)[0].source in before
    assert old.bm25_rebuilds == 0  # no rebuild at every load of an older index
    old.index("PEP: 8\nTitle: Style Guide", source="peps/pep-0008-copy.rst")
    old.save()  # still the older terms: the manifest says so
    assert json.loads((tmp_path / "manifest.json").read_text())["tokenizer"] == manifest["tokenizer"]
    again = RAG.load(tmp_path)
    assert again.upgrade_bm25() and again.bm25_rebuilds == 1 and not again.upgrade_bm25()
    again.save()
    assert json.loads((tmp_path / "manifest.json").read_text())["tokenizer"].endswith("+identifiers")
    upgraded = RAG.load(tmp_path)
    assert upgraded.search("What does PEP 572 introduce?", top_k=1)[0].source == "peps/pep-0572.rst"
    assert upgraded.bm25_rebuilds == 0


def test_selfrag_index_upgrades_an_index_saved_before_identifier_terms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, index = tmp_path / "peps", tmp_path / "index"
    folder.mkdir()
    for source, text in DOCS.items():
        if source.startswith("peps/"):
            (folder / source.removeprefix("peps/")).write_text(text, encoding="utf-8")
    argv = ["index", str(folder), "--index", str(index), "--embedder", "none"]
    with monkeypatch.context() as m:
        _legacy(m)
        assert cli.main(argv) == 0
    assert "+" not in json.loads((index / "manifest.json").read_text())["tokenizer"]
    capsys.readouterr()
    assert cli.main(argv) == 0  # nothing new to index: the BM25 index is rebuilt and saved
    assert "was rebuilt: identifiers are searchable" in capsys.readouterr().err
    assert cli.main(argv) == 0
    assert "rebuilt" not in capsys.readouterr().err  # once
    assert json.loads((index / "manifest.json").read_text())["tokenizer"].endswith("+identifiers")
    hits = RAG.load(index).search("What does PEP 572 introduce?", top_k=1)
    assert hits[0].source == str((folder / "pep-0572.rst").resolve())
