"""The backend conformance suite (:mod:`selfrag_core.conformance`) against a real Chroma
server (``chroma run`` on loopback, hashing embeddings), opened by its URL scheme
through the ``selfrag.backends`` entry point, as ``--backend chroma://...`` opens it."""

from __future__ import annotations

import pytest

from selfrag_core.backends.chroma import ChromaBackend
from selfrag_core.conformance import BackendConformance
from selfrag_core.presets import open_backend

pytestmark = pytest.mark.integration


class TestChromaServer(BackendConformance):
    @pytest.fixture
    def backend(self, chroma_url: str) -> ChromaBackend:
        opened = open_backend(chroma_url, embed="hashing")
        assert isinstance(opened, ChromaBackend)
        return opened
