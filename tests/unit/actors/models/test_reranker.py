"""HttpReranker against the scripted server: the §14.6 request shape, validation and ordering."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

import pytest

from actors.models.embeddings import HttpReranker
from protocol.semantic import RERANKER_UNAVAILABLE_MESSAGE, RerankError
from testkit.scripted_server import Reply, ScriptedServer, http_error, rerank_reply

SECRET_QUERY = "secret query 91c2"


def omray_log(caplog: pytest.LogCaptureFixture) -> str:
    """What omray itself logged (the HTTP libraries log request bodies at DEBUG)."""
    return "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("omray"))


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def scores_by_marker(table: dict[str, float]) -> Callable[[str, Sequence[str]], list[float]]:
    """A scripted rerank scorer: each document's score is looked up by its text."""

    def score(_query: str, documents: Sequence[str]) -> list[float]:
        return [table[document] for document in documents]

    return score


def test_ten_documents_batch_eight_sends_sizes_8_and_2_truncated_to_768(server: ScriptedServer) -> None:
    documents = [f"{i}" + "é" * 1000 for i in range(10)]
    reranker = HttpReranker(server.root_url + "/v1/", "rerank-model", timeout_s=5)

    order = reranker.rerank("which one", documents)

    requests = server.requests_to("/v1/rerank")
    assert [len(request.body["documents"]) for request in requests] == [8, 2]
    sent = [document for request in requests for document in request.body["documents"]]
    assert sent == [document[:768] for document in documents]  # code points, not bytes
    assert all(len(document) == 768 for document in sent)
    for request, size in zip(requests, [8, 2], strict=True):
        assert request.body["model"] == "rerank-model"
        assert request.body["query"] == "which one"
        assert request.body["top_n"] == size
        assert set(request.body) == {"model", "query", "documents", "top_n"}
    assert sorted(order) == list(range(10))


def test_order_is_score_desc_then_original_index(server: ScriptedServer) -> None:
    server.push_rerank(rerank_reply([(0, 1.0), (1, 3.0), (2, 1.0)]), rerank_reply([(1, 3), (0, 0.5)]))
    reranker = HttpReranker(server.root_url, "m", batch_size=3)
    assert reranker.rerank("q", ["a", "b", "c", "d", "e"]) == [1, 4, 0, 2, 3]


def test_min_score_is_inclusive_across_batches(server: ScriptedServer) -> None:
    table = {"d0": -3.9, "d1": -4.0, "d2": -4.01, "d3": -3.9, "d4": -6.0}
    with ScriptedServer(rerank=scores_by_marker(table)) as scripted:
        reranker = HttpReranker(scripted.root_url, "m", batch_size=3, min_score=-4)
        assert reranker.rerank("q", list(table)) == [0, 3, 1]
        assert [len(r.body["documents"]) for r in scripted.requests_to("/rerank")] == [3, 2]


def test_everything_below_the_floor_gives_no_results(server: ScriptedServer) -> None:
    server.push_rerank(rerank_reply([(0, -5.0), (1, -4.5)]))
    assert HttpReranker(server.root_url, "m", min_score=-4).rerank("q", ["a", "b"]) == []


def test_no_documents_makes_no_request(server: ScriptedServer) -> None:
    assert HttpReranker(server.root_url, "m").rerank("q", []) == []
    assert server.requests == []


def results(*items: object) -> Reply:
    return Reply(body={"results": list(items)})


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(rerank_reply([(0, 1.0), (0, 2.0)]), id="duplicate-index"),
        pytest.param(rerank_reply([(0, 1.0)]), id="fewer-results-than-batch"),
        pytest.param(rerank_reply([(0, 1.0), (1, 1.0), (1, 1.0)]), id="more-results-than-batch"),
        pytest.param(rerank_reply([(0, 1.0), (2, 1.0)]), id="index-out-of-range"),
        pytest.param(rerank_reply([(0, 1.0), (-1, 1.0)]), id="negative-index"),
        pytest.param(
            results({"index": 0, "relevance_score": 1}, {"index": 1.0, "relevance_score": 1}),
            id="float-index",
        ),
        pytest.param(
            results({"index": 0, "relevance_score": 1}, {"index": True, "relevance_score": 1}),
            id="bool-index",
        ),
        pytest.param(
            results({"index": 0, "relevance_score": 20}, {"index": 1, "relevance_score": "20"}),
            id="string-score",
        ),
        pytest.param(
            results({"index": 0, "relevance_score": 20}, {"index": 1, "relevance_score": None}),
            id="null-score",
        ),
        pytest.param(
            results({"index": 0, "relevance_score": 20}, {"index": 1, "relevance_score": False}),
            id="bool-score",
        ),
        pytest.param(results({"index": 0, "relevance_score": 20}, {"index": 1}), id="missing-score"),
        pytest.param(results({"index": 0, "relevance_score": 20}, [1, 20]), id="result-not-an-object"),
        pytest.param(
            Reply(body=b'{"results":[{"index":0,"relevance_score":NaN},{"index":1,"relevance_score":1}]}'),
            id="nan-score",
        ),
        pytest.param(Reply(body=[{"index": 0, "score": 1}, {"index": 1, "score": 2}]), id="list-body"),
        pytest.param(Reply(body={"data": []}), id="no-results-key"),
        pytest.param(Reply(body=b"<html>"), id="not-json"),
        pytest.param(http_error(500), id="http-500"),
        pytest.param(http_error(404), id="http-404"),
    ],
)
def test_every_invalid_response_is_reranker_unavailable(
    server: ScriptedServer, reply: Reply, caplog: pytest.LogCaptureFixture
) -> None:
    server.push_rerank(reply)
    caplog.set_level(logging.DEBUG, logger="omray")
    # The floor would drop every document: a bad response must still fail, not vanish.
    reranker = HttpReranker(server.root_url, "m", min_score=10)
    with pytest.raises(RerankError) as info:
        reranker.rerank(SECRET_QUERY, ["doc a", "doc b"])
    assert info.value.code == "reranker_unavailable"
    assert str(info.value) == RERANKER_UNAVAILABLE_MESSAGE
    assert info.value.__cause__ is None
    assert info.value.__context__ is None or info.value.__suppress_context__
    assert SECRET_QUERY not in omray_log(caplog) and "scripted error" not in omray_log(caplog)


def test_failure_in_a_later_batch_fails_the_whole_rerank(server: ScriptedServer) -> None:
    server.push_rerank(rerank_reply([(0, 1.0), (1, 2.0)]), http_error(503))
    with pytest.raises(RerankError):
        HttpReranker(server.root_url, "m", batch_size=2).rerank("q", ["a", "b", "c"])
    assert len(server.requests_to("/rerank")) == 2


def test_transport_failures_are_reranker_unavailable(server: ScriptedServer) -> None:
    server.push_rerank(Reply(body={}, delay_s=5))
    with pytest.raises(RerankError) as timeout:
        HttpReranker(server.root_url, "m", timeout_s=0.2).rerank("q", ["a"])
    assert timeout.value.reason == "timeout"
    with ScriptedServer() as gone:
        url = gone.root_url
    with pytest.raises(RerankError) as refused:
        HttpReranker(url, "m", timeout_s=2).rerank("q", ["a"])
    assert refused.value.reason == "transport"


def test_api_key_header_when_configured(server: ScriptedServer) -> None:
    HttpReranker(server.root_url, "m", api_key_env="RR_KEY", environ={"RR_KEY": "sk-rr"}).rerank("q", ["a"])
    assert server.requests[0].headers["authorization"] == "Bearer sk-rr"
    HttpReranker(server.root_url, "m").rerank("q", ["a"])
    assert "authorization" not in server.requests[1].headers
