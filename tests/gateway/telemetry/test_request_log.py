"""One JSON line per request: who, what, how long, how it ended; never the text."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
import pytest

from gateway.telemetry.request_log import LOGGER, RequestLine, RequestLog, to_stdout


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


LINE = RequestLine(
    request_id="req-1", tenant="t1", key_id="key_1", model="m", cls="short", tier="interactive", backend="b",
    predicted_tokens=40, input_tokens=12, output_tokens=37, queue_wait_s=0.12345678, ttft_s=None,
    duration_s=1.0000004, pauses=1, outcome="ok", status=200,
)


def test_a_line_is_one_json_object_with_class_spelled_out_and_times_rounded() -> None:
    logger = logging.getLogger("test.request_log")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    lines = Lines()
    logger.addHandler(lines)
    RequestLog(logger).write(LINE)
    logger.removeHandler(lines)

    (line,) = lines.lines
    record = orjson.loads(line)
    assert record["event"] == "request" and isinstance(record["time"], float)
    assert record["class"] == "short" and "cls" not in record
    assert record["queue_wait_s"] == 0.123457 and record["duration_s"] == 1.0 and record["ttft_s"] is None
    assert {k: record[k] for k in ("request_id", "tenant", "key_id", "output_tokens", "outcome", "status")} == {
        "request_id": "req-1", "tenant": "t1", "key_id": "key_1", "output_tokens": 37, "outcome": "ok", "status": 200,
    }


@pytest.fixture
def restored_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger(LOGGER)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield logger
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def test_to_stdout_adds_one_bare_handler_however_often_it_is_called(
    restored_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    to_stdout()
    to_stdout()
    assert sum(getattr(h, "_triage_stdout", False) for h in restored_logger.handlers) == 1
    RequestLog().write(LINE)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and orjson.loads(out[0])["request_id"] == "req-1"  # the message alone, no prefix
