"""RAG: indexing, checksum skip, search modes, filters, rerankers, query, strategies, bad input."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from selfrag_core import HyDERAG, RecursiveRAG, SelfHealingRAG, SelfHealingRAGConfig, SelfIRAG
from selfrag_core.errors import ConfigurationError, LLMTimeoutError, MissingDependencyError
from selfrag_core.retrieval import _aretrieve_safe, _retrieve_safe
from selfrag_core.store import RAG, HashingEmbeddings, QueryResult, SearchHit
from selfrag_core.store import rag as rag_module
from selfrag_core.store.lexical import LexicalIndex
from selfrag_core.testing import FakeLLM
from selfrag_core.types import RetrievedDoc, ScoreKind

DOCS = {
    "paris": "Paris is the capital of France. The city lies on the river Seine.",
    "berlin": "Berlin is the capital of Germany and its largest city.",
    "nile": "The Nile is the longest river in Africa and flows into the Mediterranean Sea.",
    "photo": "Photosynthesis converts light energy into chemical energy stored in glucose.",
}


def make(**kwargs: Any) -> RAG:
    rag = RAG(**kwargs)
    rag.index_many([{"text": t, "source": s} for s, t in DOCS.items()])
    return rag


class TableEmbeddings:
    """Vectors chosen per text (by a keyword), to control dense scores exactly."""

    name = "table"

    def __init__(self, table: dict[str, list[float]], query: list[float]) -> None:
        self.table = table
        self.query = query
        self.calls = 0

    def _vec(self, text: str) -> list[float]:
        return next(v for k, v in self.table.items() if k in text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.query


# ----------------------------------------------------------------------------- indexing


def test_lexical_search_finds_the_right_document_and_logs_lexical_mode_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="selfrag"):
        rag = make()
        rag.search("capital of Germany")
    assert sum("lexical (BM25) only" in r.message for r in caplog.records) == 1
    hits = rag.search("What is the capital of Germany?", top_k=2)
    assert hits[0].source == "berlin"
    assert isinstance(hits[0], RetrievedDoc) and hits[0].score_kind is ScoreKind.SIMILARITY
    assert hits[0].score is not None and hits[0].score > 0 and hits[0].dense_score is None
    assert rag.search("quantum chromodynamics") == []  # no shared term, nothing returned


def test_checksum_skip_and_replacement_per_source() -> None:
    rag = make()
    before = rag.count()
    assert rag.index(DOCS["paris"], source="paris") == 0  # unchanged: no-op
    assert rag.count() == before
    assert rag.index("Paris hosts the Louvre museum.", source="paris") == 1  # changed: replaced
    assert rag.count() == before
    assert rag.search("Louvre")[0].source == "paris"
    assert rag.search("Seine") == []
    assert rag.index("new text", source="paris", checksum="v1") == 1
    assert rag.index("other text", source="paris", checksum="v1") == 0  # the given checksum decides


def test_documents_without_source_never_overwrite_each_other() -> None:
    rag = RAG()
    rag.index("The first note is about apples.")
    rag.index("The second note is about pears.")
    rag.add_document("A third note is about plums.", {})
    assert rag.count() == 3 and len(rag.sources()) == 3
    assert rag.index("The first note is about apples.") == 0  # same content: same generated source
    assert rag.search("apples")[0].text.startswith("The first")
    assert rag.search("pears")[0].text.startswith("The second")


def test_delete_and_count() -> None:
    rag = make()
    assert rag.delete("nile") == 1
    assert rag.delete("nile") == 0
    assert rag.count() == 3 and "nile" not in rag.sources()
    assert rag.search("longest Africa") == []
    assert rag.search("river")[0].source == "paris"


def test_metadata_filters_exact_list_and_callable() -> None:
    rag = RAG()
    rag.index("Apples are red fruit.", source="a", lang="en", year=2020)
    rag.index("Apples are green fruit.", source="b", lang="en", year=2024)
    rag.index("Apples are yellow fruit.", source="c", lang="fr", year=2024)
    assert {h.source for h in rag.search("apples", year=2024)} == {"b", "c"}
    assert {h.source for h in rag.search("apples", lang="en", year=2024)} == {"b"}
    assert {h.source for h in rag.search("apples", source=["a", "c"])} == {"a", "c"}
    assert {h.source for h in rag.search("apples", year=lambda y: y < 2024)} == {"a"}
    assert {h.source for h in rag.search("apples", metadata_filter=lambda m: m["lang"] == "fr")} == {"c"}
    assert rag.search("apples", missing_key="x") == []
    docs = _retrieve_safe(rag, "apples", 5, metadata_filter={"lang": "fr"})
    assert [d.metadata["source"] for d in docs] == ["c"]


def test_hybrid_weighting_orders_by_alpha() -> None:
    # lexical favours A, dense favours B, C is second on both
    texts = {
        "A": "zebra zebra zebra stripes savanna",
        "B": "an animal picture",
        "C": "zebra animal in the wild savanna",
    }
    emb = TableEmbeddings(
        {"stripes": [1.0, 0.0], "picture": [0.0, 1.0], "wild": [0.6, 0.8]}, query=[0.05, 1.0]
    )

    def ranking(alpha: float) -> list[str]:
        rag = RAG(emb, bm25_alpha=alpha)
        rag.index_many([{"text": t, "source": s} for s, t in texts.items()])
        return [h.source for h in rag.search("zebra savanna", top_k=3)]

    assert ranking(0.0)[0] == "A" and "B" not in ranking(0.0)
    assert ranking(1.0)[0] == "B"
    assert ranking(0.5)[0] == "C"
    hit = RAG(emb, bm25_alpha=0.5)
    hit.index("zebra stripes", source="A")
    h = hit.search("zebra")[0]
    assert h.lexical_score is not None and h.dense_score is not None


def test_hashing_embeddings_are_deterministic_and_normalised() -> None:
    emb = HashingEmbeddings(dim=64)
    a = emb.embed_documents(["the cat sat", "dogs bark"])
    assert a.shape == (2, 64)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(a[0], emb.embed_query("the cat sat"))
    assert float(a[0] @ emb.embed_query("the cats sat")) > float(a[0] @ a[1])
    rag = make(embed="hashing", bm25_alpha=1.0)
    assert rag.search("capital of France")[0].source == "paris"


def test_mmr_diversity_reranker_skips_near_duplicates() -> None:
    texts = {
        "d1": "solar panels convert sunlight into electricity efficiently",
        "d2": "solar panels convert sunlight into electricity very efficiently",
        "d3": "besides solar power, wind turbines and water dams in the region "
        "also feed the national electricity grid",
    }
    plain = RAG(reranker="noop")
    diverse = RAG(reranker="diversity")
    for rag in (plain, diverse):
        rag.index_many([{"text": t, "source": s} for s, t in texts.items()])
    assert {h.source for h in plain.search("solar electricity", top_k=2)} == {"d1", "d2"}
    picked = [h.source for h in diverse.search("solar electricity", top_k=2)]
    assert picked[0] in {"d1", "d2"} and picked[1] == "d3"


def test_cross_encoder_hook_rescores() -> None:
    class Scorer:
        def score(self, query: str, texts: list[str]) -> list[float]:
            return [10.0 if "Nile" in t else 0.0 for t in texts]

    rag = make(reranker=Scorer())
    hits = rag.search("river", top_k=2)
    assert hits[0].source == "nile" and hits[0].score == 10.0
    rag2 = make(reranker=lambda q, texts: [float(len(t)) for t in texts])
    hits2 = rag2.search("capital", top_k=2)
    assert hits2[0].score is not None and hits2[1].score is not None and hits2[0].score >= hits2[1].score
    with pytest.raises(ConfigurationError, match="needs the model"):
        RAG(reranker="cross_encoder")


def test_query_expander_results_are_fused() -> None:
    assert make().search("how do plants feed") == []  # nothing shared with the original query
    rag2 = make(query_expander=lambda q: ["photosynthesis glucose"])
    assert rag2.search("how do plants feed")[0].source == "photo"


QUERIES = ["river Seine", "capital of Germany", "light energy glucose", "how do plants feed"]


@pytest.mark.parametrize(
    "options",
    [
        {"embed": "hashing", "bm25_alpha": 0.5},
        {"embed": "hashing", "bm25_alpha": 1.0},
        {},  # lexical only
        {"embed": "hashing", "reranker": "diversity", "query_expander": lambda q: [q + " river"]},
    ],
    ids=["hybrid", "dense", "lexical", "reranked-expanded"],
)
def test_search_many_finds_what_search_finds_for_each_query(options: dict[str, Any]) -> None:
    rag = make(**options)
    many = rag.search_many(QUERIES, top_k=3)
    assert [[h.id for h in hits] for hits in many] == [[h.id for h in rag.search(q, 3)] for q in QUERIES]
    assert [[h.score for h in hits] for hits in many] == [
        pytest.approx([h.score for h in rag.search(q, 3)], abs=1e-6) for q in QUERIES
    ]
    filtered = rag.search_many(QUERIES[:2], source=["berlin", "nile"])
    assert filtered == [rag.search(q, source=["berlin", "nile"]) for q in QUERIES[:2]]
    assert rag.search_many([]) == [] and RAG().search_many(QUERIES) == [[], [], [], []]


def test_search_many_embeds_all_queries_in_one_call_where_the_embedder_can() -> None:
    calls: list[list[str]] = []

    class Batching(HashingEmbeddings):
        def embed_queries(self, texts: list[str]) -> np.ndarray:
            calls.append(list(texts))
            return np.stack([self.embed_query(t) for t in texts])

    rag = make(embed=Batching(), bm25_alpha=0.5)
    many = rag.search_many(QUERIES[:3])
    assert calls == [QUERIES[:3]]
    assert [h.id for h in many[0]] == [h.id for h in make(embed="hashing", bm25_alpha=0.5).search(QUERIES[0])]


def test_search_many_rejects_bad_input_before_searching() -> None:
    rag = make()
    with pytest.raises(TypeError, match="list of queries"):
        rag.search_many("river Seine")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of queries, got generator"):
        asyncio.run(rag.asearch_many(q for q in ["river"]))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        rag.search_many(["river", "  "])
    with pytest.raises(ValueError, match="top_k"):
        rag.search_many(["river"], top_k=0)


def test_arabic_text_is_searchable_with_prefixes_and_diacritics() -> None:
    rag = RAG()
    rag.index("الكتاب على الطاولة في المكتبة الكبيرة", source="book")
    rag.index("تقع مدينة القاهرة على ضفاف نهر النيل", source="cairo")
    rag.index("The library has many English books.", source="en")
    assert rag.search("كتاب")[0].source == "book"
    assert rag.search("والكتاب")[0].source == "book"
    assert rag.search("نَهْر النيل")[0].source == "cairo"  # diacritics ignored
    assert rag.search("English library")[0].source == "en"


# ----------------------------------------------------------------------------- scaling


def test_indexing_one_by_one_rebuilds_nothing_and_scores_as_a_full_rebuild() -> None:
    rag = RAG(embed=HashingEmbeddings(dim=32))
    for i in range(2000):
        rag.index(f"document {i} mentions token{i} and shared words", source=f"s{i}")
    assert rag.count() == 2000
    assert rag.search("token1999")[0].source == "s1999"
    assert rag.search("token7")[0].source == "s7"
    rag.index("a late document about token2000", source="late")
    rag.delete("s0")
    rag.index("document 5 now mentions token77 instead", source="s5")  # replaced
    assert rag.search("token2000")[0].source == "late"
    assert rag.bm25_rebuilds == 0  # each change is a segment or a mark, never a rebuild
    assert len(rag._index._lexical.segments) <= LexicalIndex.MAX_SEGMENTS + 1
    fresh = RAG(embed=HashingEmbeddings(dim=32))  # the same documents in the same order, at once
    kept = [i for i in range(1, 2000) if i != 5]
    fresh.index_many(
        [{"text": f"document {i} mentions token{i} and shared words", "source": f"s{i}"} for i in kept]
        + [{"text": "a late document about token2000", "source": "late"},
           {"text": "document 5 now mentions token77 instead", "source": "s5"}]
    )  # fmt: skip
    for query in ("token2000", "shared words token77", "document mentions", "token5 token1500"):
        assert [h.to_dict() for h in rag.search(query, top_k=20)] == [
            h.to_dict() for h in fresh.search(query, top_k=20)
        ]


def test_autorebuild_off_waits_for_explicit_rebuild() -> None:
    rag = make(bm25_autorebuild=False)
    rag.rebuild_bm25_from_store()
    rag.index("Tokyo is the capital of Japan.", source="tokyo")
    rag.delete("berlin")
    assert [h.source for h in rag.search("capital", top_k=5)] == ["paris"]  # stale, deleted skipped
    assert rag.rebuild_bm25_from_store() == 4
    assert {h.source for h in rag.search("capital", top_k=5)} == {"paris", "tokyo"}


# ----------------------------------------------------------------------------- query


def test_query_builds_prompt_and_result() -> None:
    llm = FakeLLM("Berlin.")
    rag = make(generate_fn=llm)
    result = rag.query("What is the capital of Germany?", top_k=2)
    assert isinstance(result, QueryResult)
    assert result.answer == "Berlin." and result.llm_called
    assert result.sources[0] == "berlin" and result.hits[0].source == "berlin"
    assert "Berlin is the capital of Germany" in result.prompt
    assert "What is the capital of Germany?" in result.prompt
    assert llm.prompts == [result.prompt]
    assert result.usage.attempts == 1 and result.duration > 0
    assert result.to_dict()["hits"][0]["source"] == "berlin"


def test_query_template_is_filled_safely_with_braces_in_documents() -> None:
    rag = RAG(generate_fn=FakeLLM("ok"))
    rag.index('Config uses {"key": {question}} and {context} literally.', source="cfg")
    result = rag.query("What does the config use?", prompt_template="Q={question}\nC={context}\nJSON {x}")
    assert result.prompt.startswith("Q=What does the config use?\nC=[1] (source: cfg) Config uses")
    assert '{"key": {question}} and {context} literally.' in result.prompt
    assert result.prompt.endswith("JSON {x}")
    with pytest.raises(ConfigurationError, match="placeholders"):
        rag.query("What?", prompt_template="no placeholders here")


def test_query_context_budget_and_empty_behaviour() -> None:
    llm = FakeLLM("answer")
    rag = make(generate_fn=llm)
    result = rag.query("capital city", max_context_chars=40)
    context = result.prompt.split("\n", 1)[1].split("\n\nQuestion:", 1)[0]
    assert len(context) <= 40
    skipped = rag.query("zzzz unknown words", allow_llm_on_empty=False)
    assert skipped.answer == "" and not skipped.llm_called and llm.n_calls == 1
    asked = rag.query("zzzz unknown words")
    assert asked.llm_called and asked.hits == [] and llm.n_calls == 2
    wide = rag.query("capital city", max_context_chars=130)  # whole blocks, the last one cut to fit
    context = wide.prompt.split("\n", 1)[1].split("\n\nQuestion:", 1)[0]
    assert 0 < len(context) <= 130 and context.startswith("[1] (source: ") and "\n[2] (source: " in context


def test_query_timeout_and_missing_llm() -> None:
    rag = make(generate_fn=FakeLLM("late", latency=0.5), llm_retries=0)
    with pytest.raises(LLMTimeoutError):
        rag.query("capital", generate_timeout=0.05)
    with pytest.raises(ConfigurationError, match="generate_fn"):
        make().query("capital")


async def test_async_api() -> None:
    rag = RAG(generate_fn=FakeLLM("async answer"))
    assert await rag.aindex(DOCS["paris"], source="paris") == 1
    assert await rag.aindex_many([{"text": DOCS["nile"], "source": "nile", "metadata": {"k": "v"}}]) == 1
    assert (await rag.asearch("Seine"))[0].source == "paris"
    assert (await rag.asearch("river", k="v"))[0].source == "nile"
    docs = await _aretrieve_safe(rag, "Nile", 3)
    assert docs[0].metadata["source"] == "nile"
    result = await rag.aquery("Which river flows through Paris?")
    assert result.answer == "async answer" and "paris" in result.sources


async def test_cheap_async_searches_run_on_the_loop_and_costly_ones_in_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rag_module, "INLINE_SEARCH_S", 0.005)  # margin for a busy CI machine
    rag, threads, extra_cpu = make(), [], [0.0]
    search_many = rag.search_many

    def spy(*args: Any, **kwargs: Any) -> list[list[SearchHit]]:
        threads.append(threading.get_ident())
        end = time.thread_time() + extra_cpu[0]
        while time.thread_time() < end:  # a slow embedder or reranker
            pass
        return search_many(*args, **kwargs)

    monkeypatch.setattr(rag, "search_many", spy)
    loop = threading.get_ident()
    for _ in range(4):
        assert (await rag.aretrieve("Seine"))[0].metadata["source"] == "paris"
    assert threads[0] != loop  # cost unknown (and the first search warms up): a worker thread
    assert threads[-2:] == [loop, loop]  # cheap: no thread hop
    extra_cpu[0] = 0.02
    await rag.aretrieve("Seine")  # runs inline once, and is measured
    threads.clear()
    await rag.asearch("Seine")
    assert threads != [loop]  # costly now: back to a thread
    extra_cpu[0] = 0.0
    await rag.aretrieve("Seine")
    await rag.aretrieve_many(["Seine", "Nile"])  # cheap per query, and two of them: still inline
    assert threads[-1] == loop
    monkeypatch.setattr(rag_module, "INLINE_SEARCH_S", 1.5 * rag._search_cpu_s)
    await rag.aretrieve_many(["Seine", "Nile", "Berlin"])  # three cost more than the allowance
    assert threads[-1] != loop


# ----------------------------------------------------------------------------- strategies


def test_rag_is_a_backend_for_all_four_strategies() -> None:
    rag = make(embed="hashing")
    docs = _retrieve_safe(rag, "capital of France", 2)
    assert docs[0].text == DOCS["paris"] and docs[0].score_kind is ScoreKind.SIMILARITY
    llm = FakeLLM("Paris is the capital of France.")
    self_rag = SelfIRAG(rag, llm)
    healing = SelfHealingRAG(llm, [rag], config=SelfHealingRAGConfig(confidence_threshold=0.0))
    for strategy in (self_rag, HyDERAG(rag, llm), RecursiveRAG(rag, llm), healing):
        run = getattr(strategy, "query", None) or healing.ask_with_report_sync
        result: Any = run("What is the capital of France?")
        assert result.answer
        assert any(d.metadata.get("source") == "paris" for d in result.sources), type(strategy).__name__
        assert not [e for e in result.trace.fallbacks if "retriev" in e.name], type(strategy).__name__
    self_rag.add_document("Madrid is the capital of Spain.", {"source": "madrid"})
    assert rag.search("Madrid Spain")[0].source == "madrid"


# ----------------------------------------------------------------------------- configuration


def test_from_config_toml(tmp_path: Path) -> None:
    config = tmp_path / "selfrag.toml"
    config.write_text(
        '[rag]\nembed = "hashing"\nchunker = "markdown"\nchunk_size = 300\nchunk_overlap = 30\n'
        'bm25_alpha = 0.3\nreranker = "diversity"\npath = "index"\n',
        encoding="utf-8",
    )
    rag = RAG.from_config(config, chunk_size=400)
    assert isinstance(rag.embedder, HashingEmbeddings)
    assert rag.chunker.strategy == "markdown" and rag.chunker.chunk_size == 400
    assert rag.bm25_alpha == 0.3 and rag.path == tmp_path / "index"
    config.write_text("[rag]\nchunk_sise = 3\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="chunk_sise"):
        RAG.from_config(config)
    config.write_text("[rag\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        RAG.from_config(config)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"bm25_alpha": 0.5}, ConfigurationError, "no embedder"),
        ({"embed": "hashing", "bm25_alpha": 1.5}, ConfigurationError, "bm25_alpha"),
        ({"embed": "minilm-remote"}, ConfigurationError, "unknown embedder"),
        ({"embed": object()}, TypeError, "embed_documents"),
        ({"reranker": "fancy"}, ConfigurationError, "unknown reranker"),
        ({"chunker": "sentences"}, ConfigurationError, "unknown chunker"),
    ],
)
def test_bad_configuration(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        RAG(**kwargs)


def test_missing_bm25s_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(MissingDependencyError, match=r"selfrag\[store\]"):
        RAG()


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("", ValueError, "empty"),
        ("   \n\t", ValueError, "empty"),
        (None, TypeError, "must be a str"),
        (42, TypeError, "must be a str"),
        (b"bytes text", TypeError, "decode"),
        ("abc\x00def" * 10, ValueError, "binary"),
        ("\x01\x02\x03\x04garbage\x05\x06" * 20, ValueError, "binary"),
        ("\ufffd\ufffd\ufffd bad decode \ufffd\ufffd" * 20, ValueError, "binary"),
    ],
)
def test_bad_text_is_rejected_and_nothing_is_lost(text: Any, error: type[Exception], message: str) -> None:
    rag = make(embed="hashing")
    with pytest.raises(error, match=message):
        rag.index(text, source="paris")
    with pytest.raises(error, match=message):
        rag.index_many([{"text": "A valid new document.", "source": "new"}, {"text": text}])
    assert rag.count() == 4 and "new" not in rag.sources()
    assert rag.search("Seine")[0].source == "paris"


def test_bad_metadata_source_and_query() -> None:
    rag = make()
    with pytest.raises(TypeError, match="metadata value"):
        rag.index("text", source="x", tags=["a", "b"])
    with pytest.raises(TypeError, match="source"):
        rag.index("text", source=123)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no 'text'"):
        rag.index_many([{"source": "x"}])
    with pytest.raises(ValueError, match="empty"):
        rag.search("   ")
    with pytest.raises(ValueError, match="top_k"):
        rag.search("capital", top_k=0)
    assert rag.count() == 4


def test_embedder_failure_leaves_index_intact() -> None:
    class Broken(HashingEmbeddings):
        fail = False

        def embed_documents(self, texts: list[str]) -> np.ndarray:
            if self.fail:
                raise RuntimeError("embedder crashed")
            return super().embed_documents(texts)

    emb = Broken(dim=32)
    rag = make(embed=emb)
    emb.fail = True
    with pytest.raises(RuntimeError, match="crashed"):
        rag.index("Paris hosts the Louvre museum.", source="paris")
    assert rag.count() == 4 and rag.search("Seine")[0].source == "paris"


def test_search_hit_is_a_retrieved_doc() -> None:
    hit = make().search("Seine")[0]
    assert isinstance(hit, SearchHit)
    data = hit.to_dict()
    assert data["score_kind"] == "similarity" and data["metadata"]["source"] == "paris"


def test_chunks_without_index_terms_do_not_break_search() -> None:
    rag = RAG()
    rag.index("the and of a", source="stop")
    assert rag.search("the") == []
    rag.index("Owls hunt at night.", source="owl")
    assert [h.source for h in rag.search("owls")] == ["owl"]
    assert rag.search("of the") == []


def test_hashing_embeddings_match_the_feature_by_feature_definition() -> None:
    # saved indexes hold these vectors: a faster implementation must give the same bits
    import zlib

    def reference(text: str, dim: int = 256) -> np.ndarray:
        vec = np.zeros(dim, dtype=np.float32)
        for word in re.findall(r"(?u)\w+", text.casefold()):
            padded = f" {word} "
            feats = ["w:" + word] + [padded[i : i + n] for n in (3, 4) for i in range(len(padded) - n + 1)]
            for f in feats:
                h = zlib.crc32(f.encode("utf-8"))
                vec[h % dim] += -1.0 if (h >> 31) & 1 else 1.0
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec

    texts = [*DOCS.values(), "Straße, ÉCOLE et école", "", "river river river Seine"]
    texts += ["snake_case x2 a-b,c;d\te\x1ff\x7fg!h", "ASCII, then ß", "...", "a " * 3000]
    expected = np.stack([reference(t) for t in texts])
    assert np.array_equal(HashingEmbeddings().embed_documents(texts), expected)
    # several passes over the texts, and a word table forgotten and filled again on the way
    small = HashingEmbeddings()
    small._PASS_WORDS, small.WORD_LIMIT = 7, 4  # some texts alone have more words than that
    assert np.array_equal(small.embed_documents(texts), expected)
    assert np.array_equal(np.stack([small.embed_query(t) for t in texts]), expected)


def test_bm25_scores_match_bm25s_own_scoring() -> None:
    # LexicalIndex sums the query terms' scores as bm25s does, from the arrays it keeps
    # (and saves): the same scores, repeated and unknown terms included
    import bm25s

    from selfrag_core.store.lexical import LexicalIndex, Tokenizer

    tokenize = Tokenizer()
    texts = [*DOCS.values(), "Paris Paris Paris, and the river again", "owls and rivers"]
    index = LexicalIndex()
    index.build([tokenize(t) for t in texts])
    reference = bm25s.BM25()
    reference.index([tokenize(t) for t in texts], show_progress=False)
    for query in ("river Seine Paris river", "owls", "capital of France", "zebra river"):
        terms = tokenize(query)
        expected = reference.get_scores_from_ids(reference.get_tokens_ids(terms))
        got = index.scores(terms, len(texts))
        assert got.dtype == np.float32 and got.shape == (len(texts),)
        np.testing.assert_allclose(got, expected, rtol=1e-6)  # to float32 rounding
        assert got.any()
    assert not index.scores(tokenize("zebra"), len(texts)).any()
