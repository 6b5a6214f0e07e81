"""Executes notebooks/llamaindex_quickstart.ipynb (offline: scripted LLM, hashing embedding)."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "llamaindex_quickstart.ipynb"


def test_quickstart_notebook_runs() -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3").execute(cwd=str(NOTEBOOK.parent))
    outputs = "".join(
        o.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs
    )
    assert "Paris is the capital of France." in outputs
    assert "sub-questions: ['What is the capital of France?', 'What is the capital of Spain?']" in outputs
    assert "LLM calls seen: 4" in outputs
