"""OpenAIEmbedder against the scripted OpenAI-compatible server: request bodies and §14.6 validation."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator

import pytest

from actors.models.chat import MissingApiKeyError
from actors.models.embeddings import OpenAIEmbedder
from protocol.semantic import EMBEDDING_UNAVAILABLE_MESSAGE, EmbeddingError
from testkit.scripted_server import Reply, ScriptedServer, embeddings_reply, hash_vector, http_error

SECRET_TEXT = "private memory text 7f3a"


def omray_log(caplog: pytest.LogCaptureFixture) -> str:
    """What omray itself logged (the HTTP libraries log request bodies at DEBUG)."""
    return "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("omray"))


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def embedder(server: ScriptedServer) -> OpenAIEmbedder:
    return OpenAIEmbedder(server.base_url, "embed-model", api_key_env=None, timeout_s=5)


def test_embeds_in_input_order_and_sends_the_openai_body(server: ScriptedServer) -> None:
    client = embedder(server)
    assert client.dimensions is None
    texts = ["alpha", "beta", "gamma"]

    vectors = client.embed(texts)

    assert vectors == [hash_vector(text) for text in texts]
    assert client.dimensions == 8
    (request,) = server.requests_to("/v1/embeddings")
    assert request.body["model"] == "embed-model"
    assert request.body["input"] == texts
    assert request.body["encoding_format"] == "float"
    assert request.headers["authorization"] == "Bearer sk-no-key"


def test_empty_input_makes_no_request(server: ScriptedServer) -> None:
    assert embedder(server).embed([]) == []
    assert server.requests == []


def test_response_items_are_reordered_by_index(server: ScriptedServer) -> None:
    body = {
        "object": "list",
        "model": "m",
        "data": [
            {"object": "embedding", "index": 1, "embedding": [0.0, 2.0]},
            {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]},
        ],
    }
    server.push_embeddings(Reply(body=body))
    assert embedder(server).embed(["first", "second"]) == [[1.0, 0.0], [0.0, 2.0]]


def test_api_key_is_read_from_the_named_variable(server: ScriptedServer) -> None:
    client = OpenAIEmbedder(server.base_url, "m", api_key_env="EMB_KEY", environ={"EMB_KEY": "sk-emb"})
    client.embed(["x"])
    assert server.requests[0].headers["authorization"] == "Bearer sk-emb"
    with pytest.raises(MissingApiKeyError, match="'EMB_KEY'"):
        OpenAIEmbedder(server.base_url, "m", api_key_env="EMB_KEY", environ={})


def _list_body(embeddings: list[object], indexes: list[object] | None = None) -> Reply:
    data = [
        {"object": "embedding", "index": i if indexes is None else indexes[i], "embedding": vector}
        for i, vector in enumerate(embeddings)
    ]
    return Reply(body={"object": "list", "model": "m", "data": data})


@pytest.mark.parametrize(
    ("reply", "count"),
    [
        pytest.param(embeddings_reply([[1.0, 0.0]]), 2, id="fewer-vectors-than-inputs"),
        pytest.param(embeddings_reply([[1.0], [1.0], [1.0]]), 2, id="more-vectors-than-inputs"),
        pytest.param(embeddings_reply([[1.0, 0.0], [1.0]]), 2, id="dimension-differs"),
        pytest.param(embeddings_reply([[], []]), 2, id="empty-vectors"),
        pytest.param(_list_body([[1.0, "0.5"]]), 1, id="string-component"),
        pytest.param(_list_body([[1.0, True]]), 1, id="bool-component"),
        pytest.param(_list_body([[1.0, None]]), 1, id="null-component"),
        pytest.param(
            Reply(body=b'{"object":"list","data":[{"index":0,"embedding":[NaN,1.0]}]}'), 1, id="nan"
        ),
        pytest.param(
            Reply(body=b'{"object":"list","data":[{"index":0,"embedding":[Infinity]}]}'), 1, id="inf"
        ),
        pytest.param(embeddings_reply([[0.0, 0.0, 0.0]]), 1, id="zero-norm"),
        pytest.param(embeddings_reply([[1e200, 1e200]]), 1, id="norm-overflows"),
        pytest.param(_list_body([[1, 10**400]]), 1, id="int-overflows-float"),
        pytest.param(_list_body([[1.0], [1.0]], indexes=[0, 0]), 2, id="duplicate-index"),
        pytest.param(_list_body([[1.0], [1.0]], indexes=[0, 5]), 2, id="index-out-of-range"),
        pytest.param(Reply(body={"object": "list"}), 1, id="no-data"),
        pytest.param(Reply(body={"object": "list", "data": "nope"}), 1, id="data-not-a-list"),
        pytest.param(Reply(body=b"not json at all"), 1, id="not-json"),
        pytest.param(http_error(500, should_retry=False), 1, id="http-500"),
        pytest.param(http_error(401), 1, id="http-401"),
        pytest.param(http_error(429), 1, id="http-429"),
    ],
)
def test_every_invalid_response_is_embedding_unavailable(
    server: ScriptedServer, reply: Reply, count: int, caplog: pytest.LogCaptureFixture
) -> None:
    server.push_embeddings(reply)
    client = embedder(server)
    caplog.set_level(logging.DEBUG, logger="omray")
    with pytest.raises(EmbeddingError) as info:
        client.embed([f"{SECRET_TEXT} {i}" for i in range(count)])
    assert info.value.code == "embedding_unavailable"
    assert str(info.value) == EMBEDDING_UNAVAILABLE_MESSAGE
    assert info.value.__cause__ is None
    assert info.value.__context__ is None or info.value.__suppress_context__
    assert client.dimensions is None
    assert SECRET_TEXT not in omray_log(caplog) and "scripted error" not in omray_log(caplog)
    assert len(server.requests) == 1  # no retries by default


def test_integer_components_are_accepted_as_floats(server: ScriptedServer) -> None:
    server.push_embeddings(_list_body([[3, 4]]))
    (vector,) = embedder(server).embed(["x"])
    assert vector == [3.0, 4.0] and all(isinstance(value, float) for value in vector)
    assert math.isclose(math.hypot(*vector), 5.0)


def test_connection_failure_is_embedding_unavailable() -> None:
    with ScriptedServer() as scripted:
        url = scripted.base_url
    client = OpenAIEmbedder(url, "m", timeout_s=2)
    with pytest.raises(EmbeddingError) as info:
        client.embed(["x"])
    assert info.value.reason == "connection"


def test_timeout_is_embedding_unavailable(server: ScriptedServer) -> None:
    server.push_embeddings(Reply(body={}, delay_s=5))
    client = OpenAIEmbedder(server.base_url, "m", timeout_s=0.2)
    with pytest.raises(EmbeddingError) as info:
        client.embed(["x"])
    assert info.value.reason == "timeout"
