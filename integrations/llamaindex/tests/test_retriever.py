import pytest
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine

from selfrag_core.config import SelfHealingRAGConfig
from selfrag_core.strategies import HyDERAG, SelfIRAG
from selfrag_llamaindex import LlamaIndexLLM, StrategyRetriever, as_backend

from .li_fakes import HYDE_RULES, SELF_RAG_RULES

pytestmark = pytest.mark.integration

FRANCE = "What is the capital of France?"


def test_hyde_fused_documents_without_an_answer_call(make_llm, index) -> None:
    llm = make_llm(HYDE_RULES)
    retriever = StrategyRetriever(
        HyDERAG(as_backend(index), LlamaIndexLLM(llm), num_hypothetical_docs=2), top_k=3
    )
    nodes = retriever.retrieve(FRANCE)
    assert len(nodes) == 3 and nodes[0].node_id == "paris"
    assert len(llm.prompts) == 2 and all(p.startswith("Write a passage") for p in llm.prompts)


async def test_hyde_async(make_llm, index) -> None:
    llm = make_llm(HYDE_RULES)
    nodes = await StrategyRetriever(HyDERAG(as_backend(index), LlamaIndexLLM(llm))).aretrieve(FRANCE)
    assert nodes[0].node_id == "paris"
    assert len(llm.prompts) == 3  # three hypothetical documents, no answer


def test_other_strategies_give_the_sources_of_their_answer(make_llm, index) -> None:
    strategy = SelfIRAG(as_backend(index), LlamaIndexLLM(make_llm(SELF_RAG_RULES)))
    nodes = StrategyRetriever(strategy, top_k=2).retrieve(FRANCE)
    assert [n.node_id for n in nodes][:1] == ["paris"] and len(nodes) == 2


async def test_other_strategies_async(make_llm, index) -> None:
    strategy = SelfIRAG(as_backend(index), LlamaIndexLLM(make_llm(SELF_RAG_RULES)))
    nodes = await StrategyRetriever(strategy).aretrieve(FRANCE)
    assert nodes[0].node_id == "paris" and len(nodes) == 5


def test_works_under_llamaindex_own_query_engine(make_llm, index) -> None:
    retriever = StrategyRetriever(HyDERAG(as_backend(index), LlamaIndexLLM(make_llm(HYDE_RULES))), top_k=2)
    response = RetrieverQueryEngine.from_args(retriever, llm=MockLLM()).query(FRANCE)
    assert [n.node_id for n in response.source_nodes][:1] == ["paris"]
    assert "Paris is the capital of France" in str(response)  # MockLLM echoes the synthesis prompt


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="not a selfrag strategy"):
        StrategyRetriever(object())
    with pytest.raises(ValueError, match="top_k"):
        StrategyRetriever(SelfIRAG(object(), MockLLM()), top_k=0)


async def test_self_healing_sources_sync_and_async(make_llm, index) -> None:
    from selfrag_core.strategies import SelfHealingRAG

    from .li_fakes import HEALING_RULES

    strategy = SelfHealingRAG(
        LlamaIndexLLM(make_llm(HEALING_RULES)), [as_backend(index)], config=SelfHealingRAGConfig(top_k=3)
    )
    retriever = StrategyRetriever(strategy, context={"top_k": 2})
    assert [n.node_id for n in retriever.retrieve(FRANCE)][:1] == ["paris"]
    assert len(await retriever.aretrieve(FRANCE)) == 2


@pytest.mark.parametrize("strategy_cls", [HyDERAG, SelfIRAG])
async def test_nodes_are_the_backends_own_and_llm_calls_reach_the_retrievers_handlers(
    make_llm, embed, strategy_cls
) -> None:
    """Over an index built from Documents, the nodes keep their ``ref_doc_id`` and
    metadata (not rebuilt from the core's documents), sync and async; the strategy's LLM
    calls are events on the retriever's callback manager."""
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler

    from .li_fakes import CORPUS

    documents = [Document(text=text, id_=f"doc-{key}", metadata={"city": key}) for key, text in CORPUS]
    index = VectorStoreIndex.from_documents(documents, embed_model=embed)
    rules = HYDE_RULES if strategy_cls is HyDERAG else SELF_RAG_RULES
    debug = LlamaDebugHandler(print_trace_on_end=False)
    llm = make_llm(rules)
    strategy = strategy_cls(as_backend(index), LlamaIndexLLM(llm))
    retriever = StrategyRetriever(strategy, top_k=2, callback_manager=CallbackManager([debug]))
    for nodes in (retriever.retrieve(FRANCE), await retriever.aretrieve(FRANCE)):
        assert len(nodes) == 2
        for n in nodes:
            assert n.node.ref_doc_id == f"doc-{n.node.metadata['city']}"
            assert set(n.node.metadata) == {"city"}  # the node itself, no score keys added
    assert len(debug.get_llm_inputs_outputs()) == len(llm.prompts) > 0
    assert len(debug.get_event_pairs(CBEventType.RETRIEVE)) >= 2  # this retriever's, and the backend's
