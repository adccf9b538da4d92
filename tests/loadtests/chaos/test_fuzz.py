"""The fuzzer: seeded cases, round-robin over its categories; the tally's verdicts on
made-up replies; and a short run against a replica (one case of each category)."""

from __future__ import annotations

import orjson

from loadtests.chaos import fuzz
from loadtests.chaos.checks import Target, settle
from loadtests.chaos.rawhttp import Reply, request
from loadtests.chaos.stack import KEY, MAX_BODY_BYTES, MODEL

OPENAI_ERROR = orjson.dumps({"error": {"message": "m", "type": "t", "param": None, "code": "c"}})


def _cases(seed: int, n: int) -> list[fuzz.Case]:
    return list(fuzz.cases(seed, n, MODEL, KEY, MAX_BODY_BYTES))


def test_one_seed_gives_the_same_bytes_and_another_seed_other_bytes() -> None:
    first = _cases(5, 48)
    assert first == _cases(5, 48)
    assert [c.payload for c in first] != [c.payload for c in _cases(6, 48)]


def test_cases_go_round_robin_over_the_categories_and_name_their_method() -> None:
    items = _cases(1, 2 * len(fuzz.CATEGORIES))
    assert [c.category for c in items] == fuzz.CATEGORIES * 2
    for case in items:
        assert case.method == case.payload.split(b" ", 1)[0].decode("latin-1")
    valid = [c for c in items if c.category == "valid"]
    assert all(c.method == "POST" and f"Bearer {KEY}".encode() in c.payload for c in valid)


def test_an_oversized_case_is_bigger_than_the_limit_it_is_made_for() -> None:
    fuzzer = fuzz.Fuzzer(3, MODEL, KEY, max_body_bytes=2048)
    for _ in range(9):
        head, _, body = fuzzer.oversized().partition(b"\r\n\r\n")
        declared = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                         if line.lower().startswith(b"content-length:")), None)
        assert (declared or len(body)) > 2048


def test_the_tally_sorts_replies_into_failures_by_kind() -> None:
    result = fuzz.FuzzResult()
    post = fuzz.Case("wrong_types", request("POST", fuzz.CHAT, b"{}"))
    result.add(post, Reply(400, body=OPENAI_ERROR, elapsed_s=0.1))  # a client error, OpenAI-shaped: fine
    result.add(post, Reply(500, body=OPENAI_ERROR, elapsed_s=0.3))  # a server error
    result.add(post, Reply(422, body=b'{"detail": "x"}'))  # another framework's error shape
    result.add(fuzz.Case("methods_paths", request("HEAD", "/x"), "HEAD"), Reply(404))  # a HEAD has no body
    result.add(post, Reply(None, ending="reset"))  # no answer
    assert result.cases == 5
    assert result.statuses == {400: 1, 500: 1, 422: 1, 404: 1, "reset": 1}
    assert result.by_category["wrong_types"] == {400: 1, 500: 1, 422: 1, "reset": 1}
    assert [r.status for _, r in result.server_errors] == [500]
    assert [r.status for _, r in result.not_openai] == [422]
    assert [r.ending for _, r in result.no_answer] == ["reset"]
    assert result.slowest_s == 0.3
    labels = [line.split(":", 1)[0] for line in result.failures()]
    assert labels == ["5xx", "not OpenAI-shaped", "no answer"]


def test_a_504_for_the_clients_own_deadline_is_counted_but_not_a_failure() -> None:
    result = fuzz.FuzzResult()
    timeout = orjson.dumps({"error": {"message": "m", "type": "t", "param": None, "code": "queue_timeout"}})
    own = fuzz.Case("triage_headers", request("POST", fuzz.CHAT, b"{}", {"x-triage-timeout-ms": "1"}))
    result.add(own, Reply(504, body=timeout))
    assert result.own_deadline == 1 and result.failures() == []
    result.add(fuzz.Case("triage_headers", request("POST", fuzz.CHAT, b"{}")), Reply(504, body=timeout))
    assert len(result.server_errors) == 1  # no deadline of its own: the gateway's 504 is a failure


def test_a_kept_failure_holds_at_most_4_kb_of_its_payload() -> None:
    result = fuzz.FuzzResult()
    result.add(fuzz.Case("oversized", b"POST / HTTP/1.1\r\n\r\n" + b"x" * 100_000), Reply(None, ending="hang"))
    case, _ = result.no_answer[0]
    assert len(case.payload) == 4096 and case.category == "oversized"


async def test_one_case_of_each_category_against_a_replica_fails_nothing(replica: Target) -> None:
    items = list(fuzz.cases(11, len(fuzz.CATEGORIES), replica.model, replica.key, MAX_BODY_BYTES))
    result = await fuzz.run(replica.host, replica.port, items, concurrency=4, timeout_s=30)
    assert result.failures() == []
    assert result.cases == len(fuzz.CATEGORIES)
    assert set(result.by_category) == set(fuzz.CATEGORIES)
    assert result.by_category["valid"] == {200: 1}
    found, _ = await settle(replica)
    assert found.clean, found
