"""The newcomer's exercise of ``docs/how-to/write-a-backend.md``: a new backend registered
by URL scheme touches only its own module and its entry point. The page's module is
written to a folder with a ``.dist-info`` whose ``entry_points.txt`` registers
``memo = memo_backend:open_url`` in ``selfrag.backends`` (what ``pip install`` of its
package writes), and then it passes the conformance suite and ``--backend memo://...``
works in ``selfrag index``, ``ask`` and ``delete`` (output captured)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from selfrag_core import cli, presets
from selfrag_core.backends import registry
from selfrag_core.conformance import BackendConformance
from selfrag_core.errors import ConfigurationError

PAGE = Path(__file__).parents[2] / "docs" / "how-to" / "write-a-backend.md"


@pytest.fixture
def memo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """The how-to's module, installed as a distribution with its entry point."""
    code = re.search(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    assert code is not None and "def open_url" in code.group(1)
    site = tmp_path / "site"
    (site / "memo_backend-0.1.dist-info").mkdir(parents=True)
    (site / "memo_backend.py").write_text(code.group(1), encoding="utf-8")
    (site / "memo_backend-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: memo-backend\nVersion: 0.1\n"
    )
    (site / "memo_backend-0.1.dist-info" / "entry_points.txt").write_text(
        "[selfrag.backends]\nmemo = memo_backend:open_url\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "memo_backend", raising=False)
    monkeypatch.chdir(tmp_path)
    import memo_backend

    return memo_backend


def test_the_scheme_is_registered_and_the_backend_conforms(memo: object, tmp_path: Path) -> None:
    assert "memo" in registry.schemes() and "chroma" in registry.schemes()
    assert presets.backend_kind("memo://notes.json") == "url"
    opened = presets.open_backend("memo://notes.json", embed="hashing", chunk_size=300)
    assert type(opened).__name__ == "MemoBackend" and opened.count() == 0
    names = iter(range(100))
    passed = BackendConformance.check(lambda: presets.open_backend(f"memo://m{next(names)}.json"))
    assert len(passed) == len([n for n in dir(BackendConformance) if n.startswith("test_")]) >= 14


def test_the_cli_indexes_asks_and_deletes_through_the_url(
    memo: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "bees.md").write_text("Honeybees dance to show where the flowers are.\n")
    (notes / "nile.md").write_text("The Nile flows north into the Mediterranean.\n")
    url = f"memo://{tmp_path / 'notes.json'}"
    assert cli.main(["index", str(notes), "--backend", url]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"2 file(s) read, 2 new chunk(s) in {url}, which now holds 2 chunk(s)"
    assert (
        cli.main(["ask", "How do honeybees show the flowers?", "--backend", url, "--llm", "fake", "-q"]) == 0
    )
    assert "bees.md" in capsys.readouterr().out
    (notes / "nile.md").unlink()
    assert cli.main(["index", str(notes), "--backend", url]) == 0
    assert ", 1 removed file(s) dropped (1 chunk(s)) in " in capsys.readouterr().out
    assert cli.main(["delete", str(notes / "bees.md"), "--backend", url]) == 0
    assert (
        capsys.readouterr().out.splitlines()[-1]
        == f"1 source(s) deleted in {url}, which now holds 0 chunk(s)"
    )


def test_an_unregistered_scheme_names_the_registered_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"registered: chroma://.*selfrag\.backends"):
        presets.open_backend("nosuch://x")
