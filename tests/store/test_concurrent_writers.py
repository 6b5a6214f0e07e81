"""Writers of one index directory lose nothing (issue #30): each save holds the directory's
lock from its data directory to its cleanup, a writer that finds the index saved by another
since it loaded it applies its own changes over the other's, and a load that races a save
reads the save's index."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from selfrag_core.store import RAG, IndexConflictError, IndexFormatError, persist
from selfrag_core.store import rag as rag_module
from selfrag_core.store.index import Index

#: one writer process: ``RAG.load(d); r.index(...); r.save()`` again and again, as
#: ``selfrag index DIR`` beside ``selfrag serve --index DIR`` would, started together
WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from selfrag_core.store import RAG

    root, name, saves = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    (root.parent / f"ready-{name}").touch()
    while len(list(root.parent.glob("ready-*"))) < 2:
        time.sleep(0.01)
    for i in range(saves):
        rag = RAG.load(root)
        rag.index(f"Writer {name} wrote document {i} about the harbour and the castle.", source=f"{name}-{i}")
        if i % 5 == 4:
            rag.delete(f"{name}-{i - 1}")  # a delete travels as well
        rag.save()
    """
)

SAVES = 20


def expected_sources(name: str) -> set[str]:
    return {f"{name}-{i}" for i in range(SAVES) if i % 5 != 3}


def data_entries(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.name.startswith(("data-", "manifest.json."))}


def named(root: Path) -> set[str]:
    manifest: dict[str, Any] = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    return {manifest["data"], *([manifest["delta"]["data"]] if "delta" in manifest else [])}


def test_two_processes_saving_concurrently_keep_every_document(tmp_path: Path) -> None:
    root = tmp_path / "index"
    seed = RAG("hashing", path=root)
    seed.index("The seed document of the index.", source="seed")
    seed.save()
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), name, str(SAVES)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    outcomes = [(w.wait(timeout=300), w.communicate()[1]) for w in writers]
    assert [code for code, _ in outcomes] == [0, 0], "\n".join(err for _, err in outcomes)
    rag = RAG.load(root, verify=True)
    assert set(rag.sources()) == {"seed"} | expected_sources("a") | expected_sources("b")
    assert rag.search("Writer b wrote document 19", top_k=1)[0].source == "b-19"
    assert data_entries(root) == named(root)  # nothing left behind, nothing named missing


# ----------------------------------------------------------------------------- a stale writer


def saved(root: Path, *sources: str, embed: Any = "hashing") -> RAG:
    rag = RAG(embed, path=root)
    for source in sources:
        rag.index(f"The document {source} about rivers and bridges.", source=source)
    rag.save()
    return rag


def test_a_stale_writer_applies_its_changes_over_the_newer_index(tmp_path: Path) -> None:
    saved(tmp_path, "kept", "mine-replaced", "theirs-replaced", "both-deleted", "mine-deleted")
    mine, theirs = RAG.load(tmp_path), RAG.load(tmp_path)
    theirs.index("Their new document.", source="theirs-new")
    theirs.index("Their version of it.", source="theirs-replaced")
    theirs.index("Their version of this one.", source="mine-replaced")
    theirs.delete("both-deleted")
    theirs.save()
    mine.index("My new document.", source="mine-new")
    mine.index("My version of it.", source="mine-replaced")
    mine.delete("both-deleted")
    mine.delete("mine-deleted")
    mine.index("Added, then deleted by me.", source="gone")
    mine.delete("gone")
    mine.save()  # theirs is on disk since mine loaded: mine goes over it
    expected = {"kept", "mine-replaced", "theirs-replaced", "theirs-new", "mine-new"}
    assert set(mine.sources()) == expected
    reloaded = RAG.load(tmp_path)
    assert reloaded.sources() == mine.sources() and reloaded.count() == mine.count()
    assert reloaded.search("My version", top_k=1)[0].source == "mine-replaced"  # the last writer's
    assert reloaded.search("Their version of it", top_k=1)[0].source == "theirs-replaced"
    assert [h.source for h in reloaded.search("Their new document", top_k=1)] == ["theirs-new"]
    assert not mine.changed_on_disk()
    theirs.index("Their second document.", source="theirs-second")
    theirs.save()  # and the other way round: nothing of mine is lost either
    assert set(RAG.load(tmp_path).sources()) == expected | {"theirs-second"}


def test_a_document_the_other_writer_added_under_a_name_i_dropped_stays(tmp_path: Path) -> None:
    saved(tmp_path, "seed")
    mine, theirs = RAG.load(tmp_path), RAG.load(tmp_path)
    mine.index("Mine, briefly.", source="shared")
    mine.delete("shared")  # not in the index I loaded: nothing of theirs to delete
    theirs.index("Theirs, to stay.", source="shared")
    theirs.save()
    mine.save()
    assert set(RAG.load(tmp_path).sources()) == {"seed", "shared"}


def test_two_new_indexes_saved_into_one_new_directory_are_merged(tmp_path: Path) -> None:
    root = tmp_path / "new"
    first, second = RAG("hashing", path=root), RAG("hashing", path=root)  # both: nothing there yet
    first.index("The first writer's document.", source="first")
    second.index("The second writer's document.", source="second")
    first.save()
    second.save()
    assert set(RAG.load(root).sources()) == {"first", "second"}


def test_pending_changes_survive_a_refresh(tmp_path: Path) -> None:
    saved(tmp_path, "seed")
    mine, theirs = RAG.load(tmp_path), RAG.load(tmp_path)
    mine.index("Not saved yet.", source="pending")
    theirs.index("Saved by another process.", source="theirs")
    theirs.save()
    assert mine.refresh()
    assert set(mine.sources()) == {"seed", "pending", "theirs"}
    mine.save()
    assert set(RAG.load(tmp_path).sources()) == {"seed", "pending", "theirs"}


def test_an_index_rebuilt_with_another_embedder_is_a_conflict(tmp_path: Path) -> None:
    saved(tmp_path, "seed")
    mine = RAG.load(tmp_path)
    mine.index("My document.", source="mine")
    before = (tmp_path / "manifest.json").read_bytes()
    rebuilt = RAG(None)  # another writer rebuilds the index there, lexical only
    rebuilt.index("A lexical document.", source="lexical")
    rebuilt.save(tmp_path)
    assert (tmp_path / "manifest.json").read_bytes() != before
    with pytest.raises(IndexConflictError, match=r"RAG\.load") as caught:
        mine.save()
    assert isinstance(caught.value, IndexFormatError) and not caught.value.retryable
    assert set(RAG.load(tmp_path).sources()) == {"lexical"}  # theirs untouched
    assert set(mine.sources()) == {"seed", "mine"}  # and mine kept, to save elsewhere
    mine.save(tmp_path / "elsewhere")
    assert set(RAG.load(tmp_path / "elsewhere").sources()) == {"seed", "mine"}


# ----------------------------------------------------------------------------- the lock


def test_a_save_waits_for_the_writer_holding_the_lock_and_spares_its_files(tmp_path: Path) -> None:
    saved(tmp_path, "seed")
    mine = RAG.load(tmp_path)
    mine.index("My document.", source="mine")
    done = threading.Event()
    with persist.index_lock(tmp_path):  # another writer, in the middle of its save
        in_progress = tmp_path / "data-0123abcd.tmp"
        in_progress.mkdir()
        (in_progress / "store.json").write_text("{}", encoding="utf-8")
        saver = threading.Thread(target=lambda: (mine.save(), done.set()))
        saver.start()
        time.sleep(0.3)
        assert not done.is_set() and (in_progress / "store.json").exists()  # waiting, nothing deleted
        (in_progress / "store.json").unlink()
        in_progress.rmdir()  # that writer's save ends
    saver.join(timeout=10)
    assert done.is_set() and set(RAG.load(tmp_path).sources()) == {"seed", "mine"}


def test_the_lock_is_released_when_a_save_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rag = saved(tmp_path, "seed")
    rag.index("Another document.", source="more")

    def crash(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(persist, "_write_file", crash)
    with pytest.raises(OSError, match="disk full"):
        rag.save()
    monkeypatch.undo()
    acquired = threading.Event()

    def take() -> None:
        with persist.index_lock(tmp_path):
            acquired.set()

    taker = threading.Thread(target=take)
    taker.start()
    taker.join(timeout=5)
    assert acquired.is_set()  # not left held
    rag.save()
    assert set(RAG.load(tmp_path).sources()) == {"seed", "more"}


def test_the_lock_refuses_a_foreign_directory_and_creates_nothing_there(tmp_path: Path) -> None:
    (tmp_path / "holiday.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(IndexFormatError, match="not a selfrag index"), persist.index_lock(tmp_path):
        pass
    assert [p.name for p in tmp_path.iterdir()] == ["holiday.jpg"]


# ----------------------------------------------------------------------------- readers


def test_a_load_that_races_a_lockless_save_reads_the_new_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that takes no readers' lock (an older version of the library): the load
    starts again and reads the new index."""
    saved(tmp_path, "seed")
    monkeypatch.setattr(Index, "DELTA_MIN", 0)  # every save writes a new base and removes the old one
    monkeypatch.setattr(Index, "DELTA_SHARE", 0.0)
    writer = RAG.load(tmp_path)
    real = persist._read_data
    raced: list[bool] = []

    def read_during_a_save(root: Path, manifest: dict[str, Any], verify: bool) -> persist.StoredIndex:
        if not raced:  # the manifest is read; another process commits and cleans up now
            raced.append(True)
            writer.index("Saved while the other was loading.", source="late")
            writer.save()
        return real(root, manifest, verify)

    monkeypatch.setattr(persist, "_reading", lambda root: contextlib.nullcontext())
    monkeypatch.setattr(persist, "_read_data", read_during_a_save)
    reader = RAG.load(tmp_path)
    assert raced and set(reader.sources()) == {"seed", "late"}
    assert not reader.changed_on_disk()


def test_a_save_waits_for_a_load_under_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load holds the readers' lock: a save of this version waits for it instead of
    removing the files it reads."""
    saved(tmp_path, "seed")
    monkeypatch.setattr(Index, "DELTA_MIN", 0)
    monkeypatch.setattr(Index, "DELTA_SHARE", 0.0)
    writer = RAG.load(tmp_path)
    real = persist._read_data
    reading, saving = threading.Event(), threading.Event()
    order: list[str] = []

    def slow_read(root: Path, manifest: dict[str, Any], verify: bool) -> persist.StoredIndex:
        if threading.current_thread() is threading.main_thread():
            reading.set()
            saving.wait(5)  # the save has started: give it time to (wrongly) run
            time.sleep(0.3)
            order.append("read")
        return real(root, manifest, verify)

    def save_now() -> None:
        reading.wait(5)
        writer.index("Saved while the other was loading.", source="late")
        saving.set()
        writer.save()
        order.append("saved")

    monkeypatch.setattr(persist, "_read_data", slow_read)
    thread = threading.Thread(target=save_now)
    thread.start()
    reader = RAG.load(tmp_path)
    thread.join(10)
    assert order == ["read", "saved"]  # the save waited for the load
    assert set(reader.sources()) == {"seed"} and reader.changed_on_disk()
    monkeypatch.setattr(persist, "_read_data", real)
    assert reader.refresh() and set(reader.sources()) == {"seed", "late"}


# ----------------------------------------------------------------------------- the CLI's writer


def test_selfrag_index_keeps_what_the_server_saved_while_it_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from selfrag_core import cli

    pytest.importorskip("bm25s")
    root, docs = tmp_path / "index", tmp_path / "docs"
    docs.mkdir()
    (docs / "bees.md").write_text("Honeybees dance to show where flowers are.\n", encoding="utf-8")
    assert cli.main(["index", str(docs), "--index", str(root), "--embedder", "hashing"]) == 0
    (docs / "volcano.txt").write_text(
        "Volcanoes erupt when gas pressure breaks the rock.\n", encoding="utf-8"
    )
    real = RAG.add_prepared  # what `selfrag index` adds the files it read and chunked with
    posted: list[bool] = []

    def write_beside_a_server(self: RAG, documents: Any, *args: Any, **kwargs: Any) -> Any:
        if not posted:  # POST /documents, saved while `selfrag index` reads and indexes
            posted.append(True)
            server = RAG.load(root)
            server.index("Posted to the server meanwhile.", source="posted")
            server.save()
        return real(self, documents, *args, **kwargs)

    monkeypatch.setattr(RAG, "add_prepared", write_beside_a_server)
    assert cli.main(["index", str(docs), "--index", str(root), "--embedder", "hashing"]) == 0
    capsys.readouterr()
    names = {Path(s).name for s in RAG.load(root).sources()}
    assert names == {"bees.md", "volcano.txt", "posted"}


def test_a_refresh_that_races_this_rags_own_save_keeps_the_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved(tmp_path, "seed")
    mine, theirs = RAG.load(tmp_path), RAG.load(tmp_path)
    theirs.index("Saved by another process.", source="theirs")
    theirs.save()
    real = rag_module.load_index
    raced: list[bool] = []

    def read_then_save(*args: Any, **kwargs: Any) -> persist.StoredIndex:
        stored = real(*args, **kwargs)
        if not raced:  # the query path read the other's index; a write of this RAG saves now
            raced.append(True)
            mine.index("Mine, saved meanwhile.", source="mine")
            mine.save()
        return stored

    monkeypatch.setattr(rag_module, "load_index", read_then_save)
    mine.refresh()
    assert raced and set(mine.sources()) == {"seed", "theirs", "mine"}  # not set back to theirs
    assert not mine.changed_on_disk()
