"""notebooks/langchain_quickstart.ipynb runs top to bottom (nbclient, offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "langchain_quickstart.ipynb"


def test_quickstart_notebook_executes() -> None:
    nbformat = pytest.importorskip("nbformat", reason="pip install 'selfrag-langchain[test]'")
    nbclient = pytest.importorskip("nbclient", reason="pip install 'selfrag-langchain[test]'")
    pytest.importorskip("ipykernel", reason="pip install ipykernel")
    pytest.importorskip("langchain_community", reason="pip install 'selfrag-langchain[community]'")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})  # fmt: skip
    client.execute()
    outputs = "".join(
        out.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs
    )
    assert "Paris is the capital of France." in outputs
    assert "chain: SelfRAG[SelfIRAG]" in outputs and "  retriever: VectorStoreSearch" in outputs  # run tree
