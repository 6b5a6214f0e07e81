from __future__ import annotations

import pytest

from selfrag_core import ExecutionConfig
from selfrag_core.testing import FakeRetriever

DOCS = [
    "Paris is the capital of France. The city lies on the river Seine.",
    "Berlin is the capital of Germany and its largest city.",
    "The Nile is the longest river in Africa and flows into the Mediterranean Sea.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
]


@pytest.fixture
def backend() -> FakeRetriever:
    return FakeRetriever(list(DOCS))


@pytest.fixture
def instant() -> ExecutionConfig:
    """Retries without waiting."""

    async def no_async_sleep(_: float) -> None:
        return None

    return ExecutionConfig(sleep=lambda _: None, async_sleep=no_async_sleep)
