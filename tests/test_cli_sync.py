"""``selfrag index`` keeps the index in step with the folder (files gone from it leave the
index, counted in the summary; ``--keep-removed`` keeps them), and ``selfrag delete
SOURCE...`` removes indexed files or other sources; output captured."""

from __future__ import annotations

from pathlib import Path

import pytest

from selfrag_core import cli
from selfrag_core.store import RAG

pytest.importorskip("bm25s")

FAST = ["--embedder", "hashing"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "bees.md").write_text("Honeybees dance to show where flowers are.\n", encoding="utf-8")
    (notes / "sub" / "volcano.txt").write_text("Volcanoes erupt when gas pressure breaks rock.\n")
    (notes / "nile.txt").write_text("The Nile flows north into the Mediterranean.\n")
    return notes


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def sources(index: Path) -> set[str]:
    return set(RAG.load(index).sources())


def test_files_gone_from_the_folder_leave_the_index(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    code, out, _ = run(capsys, "index", str(folder), "--index", str(index), *FAST)
    assert code == 0 and out.startswith("3 file(s) read, 3 new chunk(s); index at")
    (folder / "sub" / "volcano.txt").unlink()
    (folder / "nile.txt").unlink()
    code, out, _ = run(capsys, "index", str(folder), "--index", str(index), *FAST)
    assert code == 0
    assert out.startswith("1 file(s) read, 0 new chunk(s), 2 removed file(s) dropped (2 chunk(s)); index at")
    assert "now holds 1 chunk(s) from 1 source(s)" in out
    assert sources(index) == {str((folder / "bees.md").resolve())}  # saved


def test_keep_removed_keeps_them_and_says_so(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    run(capsys, "index", str(folder), "--index", str(index), *FAST)
    (folder / "nile.txt").unlink()
    code, out, _ = run(capsys, "index", str(folder), "--index", str(index), "--keep-removed", *FAST)
    assert code == 0 and ", 1 file(s) gone from the folder kept (--keep-removed)" in out
    assert len(sources(index)) == 3


def test_files_emptied_in_the_folder_leave_the_index(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    """A file truncated to 0 bytes (or left with only whitespace) has no text to replace its
    old chunks with: re-indexing drops them (even with --keep-removed: the file is there),
    and they are no longer retrieved."""
    index = tmp_path / "index"
    run(capsys, "index", str(folder), "--index", str(index), *FAST)
    assert any("Nile" in h.text for h in RAG.load(index).retrieve("Where does the Nile flow?", top_k=3))
    (folder / "nile.txt").write_bytes(b"")
    (folder / "sub" / "volcano.txt").write_text("  \n\n")
    code, out, _ = run(capsys, "index", str(folder), "--index", str(index), "--keep-removed", *FAST)
    assert code == 0
    assert out.startswith("1 file(s) read, 0 new chunk(s), 2 emptied file(s) dropped (2 chunk(s)); index at")
    assert "now holds 1 chunk(s) from 1 source(s)" in out and "2 file(s) skipped" in out
    rag = RAG.load(index)  # saved
    assert set(rag.sources()) == {str((folder / "bees.md").resolve())}
    hits = rag.retrieve("Where does the Nile flow? Volcanoes erupt", top_k=3)
    assert not any("Nile" in h.text or "Volcano" in h.text for h in hits)
    code, out, _ = run(capsys, "index", str(folder), "--index", str(index), *FAST)
    assert code == 0 and "emptied file" not in out  # nothing left to drop: nothing said


def test_a_named_file_emptied_leaves_the_index(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    nile = folder / "nile.txt"
    run(capsys, "index", str(nile), str(folder / "bees.md"), "--index", str(index), *FAST)
    nile.write_text("")
    code, out, err = run(capsys, "index", str(nile), "--index", str(index), *FAST)
    assert code == 1 and f"skipped: {nile} is empty" in err  # named and unreadable, as before
    assert ", 1 emptied file(s) dropped (1 chunk(s))" in out
    assert set(sources(index)) == {str((folder / "bees.md").resolve())}


def test_only_files_under_the_folders_indexed_are_dropped(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    """Another folder's files, and a file named alone, are not this run's to drop."""
    index = tmp_path / "index"
    other = tmp_path / "other"
    other.mkdir()
    (other / "paris.md").write_text("Paris is the capital of France.\n")
    run(capsys, "index", str(folder), str(other / "paris.md"), "--index", str(index), *FAST)
    (other / "paris.md").unlink()
    code, out, _ = run(capsys, "index", str(folder / "sub"), "--index", str(index), *FAST)
    assert code == 0 and "removed" not in out and len(sources(index)) == 4


def test_delete_removes_files_and_other_sources(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    run(capsys, "index", str(folder), "--index", str(index), *FAST)
    rag = RAG.load(index)
    rag.index("Rome is the capital of Italy.", source="web:italy")
    rag.save()
    monkeypatch.chdir(folder)  # a relative path is made absolute, as indexed
    code, out, err = run(capsys, "delete", "bees.md", "web:italy", "--index", str(index))
    assert code == 0 and err == ""
    assert out.splitlines() == [
        f"deleted {(folder / 'bees.md').resolve()}: 1 chunk(s)",
        "deleted web:italy: 1 chunk(s)",
        f"2 source(s) deleted; index at {index} now holds 2 chunk(s) from 2 source(s)",
    ]
    assert len(sources(index)) == 2  # saved


def test_delete_of_a_source_not_indexed_exits_1(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    run(capsys, "index", str(folder), "--index", str(index), *FAST)
    absolute = str((folder / "nile.txt").resolve())
    code, out, err = run(capsys, "delete", absolute, "nothing-here", "--index", str(index))
    assert code == 1
    assert out.splitlines()[:2] == [f"deleted {absolute}: 1 chunk(s)", "not indexed: nothing-here"]
    assert "1 source(s) not in the index" in err
    assert len(sources(index)) == 2


def test_delete_without_an_index_names_the_fix(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "delete", "a.md", "--index", str(tmp_path / "none"))
    assert code == 2 and "run `selfrag index PATH...` first" in err


def test_a_backend_that_cannot_store_documents_is_refused_by_index_and_delete(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    module = tmp_path / "readonly_backends.py"
    module.write_text(
        "class Search:\n    def retrieve(self, query, top_k=5):\n        return []\n\n"
        "def make():\n    return Search()\n"
    )
    spec = f"{module}:make"
    for argv in (["index", str(folder)], ["delete", "a.md"]):
        code, _, err = run(capsys, *argv, "--backend", spec)
        assert code == 2
        assert f"the backend {spec}: Search cannot store documents" in err
        assert "add_documents(documents), delete(source) and count()" in err
