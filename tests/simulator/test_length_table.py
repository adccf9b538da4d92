"""The length table: listed prompts end at their listed length, continuations included."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from simulator.app import create_app
from simulator.length_table import LengthTableError, load_length_table
from simulator.prompts import chat_prompt, completion_prompt
from simulator.protocol import Endpoint
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from simulator.textgen import Vocabulary
from tests.simulator.conftest import MODEL

VOCAB = Vocabulary()
ROWS = [
    {"prompt": "How long is a piece of string?", "output_tokens": 37},
    {"messages": [{"role": "user", "content": "Old question"}, {"role": "user", "content": "Tell a joke."}],
     "output_tokens": 5},
    {"prompt": "Please say the", "output_tokens": 8},  # ends in vocabulary words
]  # fmt: skip


def write_rows(path: Path, rows: list[object]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n\n")
    return path


@pytest.fixture(scope="module")
def table_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = write_rows(tmp_path_factory.mktemp("table") / "lengths.jsonl", ROWS)
    with running_simulator(SimSettings(profile="fast", length_table=str(path))) as url:
        yield url


def test_rows_are_matched_on_the_prompt_or_the_last_user_message(tmp_path: Path) -> None:
    table = load_length_table(write_rows(tmp_path / "t.jsonl", ROWS), VOCAB)
    user = chat_prompt(
        [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Tell a joke."}], False, VOCAB
    )
    assert table.natural(Endpoint.CHAT, user) == 5
    string = chat_prompt([{"role": "user", "content": "How long is a piece of string?"}], False, VOCAB)
    assert table.natural(Endpoint.CHAT, string) == 37
    assert (
        table.natural(Endpoint.COMPLETIONS, completion_prompt("How long is a piece of string?", VOCAB)) == 37
    )
    assert table.natural(Endpoint.COMPLETIONS, completion_prompt("Tell a joke.", VOCAB)) is None  # chat only
    # Stored the way such a request is read: "Please say" is the original prompt and " the"
    # is output already, so its natural length counts 1 + 8 from "Please say".
    said = completion_prompt("Please say the", VOCAB)
    assert (table.natural(Endpoint.COMPLETIONS, said), said.run) == (9, 1)
    assert table.natural(Endpoint.COMPLETIONS, completion_prompt([1, 2, 3], VOCAB)) is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{not json", "not JSON"),
        (b"[1]", "JSON object"),
        (b'{"prompt": "a"}', "'output_tokens' must be an integer >= 1"),
        (b'{"prompt": "a", "output_tokens": 0}', "'output_tokens' must be an integer >= 1"),
        (b'{"prompt": "a", "output_tokens": true}', "'output_tokens' must be an integer >= 1"),
        (b'{"prompt": "a", "output_tokens": "5"}', "'output_tokens' must be an integer >= 1"),
        (b'{"output_tokens": 5}', "exactly one of 'prompt' and 'messages'"),
        (b'{"prompt": "a", "messages": [], "output_tokens": 5}', "exactly one of"),
        (b'{"prompt": 7, "output_tokens": 5}', "'prompt' must be a string"),
        (b'{"messages": [{"role": "system", "content": "x"}], "output_tokens": 5}', "no user message"),
        (b'{"messages": "hi", "output_tokens": 5}', "'messages' must be a list"),
    ],
)
def test_a_bad_line_is_an_error_naming_the_file_and_line(tmp_path: Path, line: bytes, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"prompt": "fine", "output_tokens": 3}\n' + line + b"\n")
    with pytest.raises(LengthTableError, match="line 2") as info:
        load_length_table(path, VOCAB)
    assert str(path) in str(info.value) and message in str(info.value)


def test_a_missing_file_fails_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(LengthTableError, match="cannot read length table"):
        create_app(SimSettings(profile="fast", length_table=str(tmp_path / "missing.jsonl")))


def test_python_m_simulator_exits_with_the_error_for_a_bad_table(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("oops\n")
    argv = [sys.executable, "-m", "simulator", "--profile", "fast", "--length-table", str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"length table {path}, line 1: not JSON" in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_listed_prompt_stops_at_its_listed_length(table_url: str) -> None:
    async with httpx.AsyncClient(base_url=table_url, timeout=30) as http:
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "How long is a piece of string?"}]}
        r = (await http.post("/v1/chat/completions", json=chat)).json()
        assert (r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]) == (37, "stop")

        joke = {"model": MODEL, "messages": [{"role": "user", "content": "Tell a joke."}]}
        r = (await http.post("/v1/chat/completions", json=joke)).json()
        assert r["usage"]["completion_tokens"] == 5

        text = {"model": MODEL, "prompt": "How long is a piece of string?"}
        r = (await http.post("/v1/completions", json=text)).json()
        assert r["usage"]["completion_tokens"] == 37

        r = (await http.post("/v1/completions", json={"model": MODEL, "prompt": "Please say the"})).json()
        assert r["usage"]["completion_tokens"] == 8

        capped = (await http.post("/v1/completions", json={**text, "max_tokens": 10})).json()
        assert (capped["usage"]["completion_tokens"], capped["choices"][0]["finish_reason"]) == (10, "length")


async def test_a_continuation_of_a_listed_prompt_gets_the_rest_of_its_length(table_url: str) -> None:
    messages = [{"role": "user", "content": "How long is a piece of string?"}]
    async with httpx.AsyncClient(base_url=table_url, timeout=30) as http:
        full = (await http.post("/v1/chat/completions", json={"model": MODEL, "messages": messages})).json()
        text = full["choices"][0]["message"]["content"]
        so_far = "".join(" " + word for word in text.split(" ")[1:13])  # the first 12 tokens
        body = {
            "model": MODEL,
            "messages": [*messages, {"role": "assistant", "content": so_far}],
            "continue_final_message": True,
            "add_generation_prompt": False,
        }
        rest = (await http.post("/v1/chat/completions", json=body)).json()
    assert rest["usage"]["completion_tokens"] == 37 - 12
    assert so_far + rest["choices"][0]["message"]["content"] == text


async def test_prompts_not_in_the_table_keep_their_drawn_length(table_url: str, sim_url: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Not listed anywhere."}]}
    async with httpx.AsyncClient(timeout=30) as http:
        listed = (await http.post(f"{table_url}/v1/chat/completions", json=body)).json()
        plain = (await http.post(f"{sim_url}/v1/chat/completions", json=body)).json()
    assert listed["usage"] == plain["usage"]
    assert listed["choices"][0]["message"] == plain["choices"][0]["message"]
