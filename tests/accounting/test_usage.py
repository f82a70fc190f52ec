"""Usage is read from the stream as it passes, whatever the split of its bytes."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from opencode_gateway.accounting.usage import StreamUsageReader, Usage, usage_from_body
from tests.support.builders import chunk, sse

USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 30,
    "total_tokens": 130,
    "prompt_tokens_details": {"cached_tokens": 80},
    "completion_tokens_details": {"reasoning_tokens": 10},
}
STREAM = sse(chunk("Hel"), chunk("lo"), {"id": "c", "model": "gpt-4o-mini", "choices": [], "usage": USAGE})


def read(data: bytes, cuts: list[int]) -> StreamUsageReader:
    reader = StreamUsageReader()
    edges = [0, *sorted(set(cuts)), len(data)]
    for start, end in itertools.pairwise(edges):
        reader.feed(data[start:end])
    reader.close()
    return reader


def test_openai_usage_with_cached_and_reasoning_tokens() -> None:
    reader = read(STREAM, [])
    assert reader.usage == Usage(input_tokens=100, output_tokens=30, cache_read_tokens=80, reasoning_tokens=10)
    assert reader.model == "gpt-4o-mini"
    assert reader.done


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_every_split_of_the_bytes_reads_the_same(cuts: list[int]) -> None:
    reader = read(STREAM, cuts)
    assert reader.usage == Usage(input_tokens=100, output_tokens=30, cache_read_tokens=80, reasoning_tokens=10)
    assert reader.model == "gpt-4o-mini" and reader.done


def test_byte_by_byte_with_crlf_line_ends() -> None:
    data = STREAM.replace(b"\n", b"\r\n")
    assert read(data, list(range(len(data)))).usage == read(STREAM, []).usage


def test_usage_before_the_final_chunk_and_an_empty_one_after_it_is_kept() -> None:
    early = {**chunk(), "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
    late_empty = {**chunk(), "usage": {"prompt_tokens": 0, "completion_tokens": 0}}
    reader = read(sse(early, chunk(), late_empty, {**chunk(), "usage": None}), [])
    assert reader.usage == Usage(input_tokens=7, output_tokens=3)


def test_the_last_non_empty_usage_wins() -> None:
    first = {**chunk(), "usage": {"prompt_tokens": 7, "completion_tokens": 1}}
    final = {**chunk(), "usage": {"prompt_tokens": 7, "completion_tokens": 9}}
    assert read(sse(first, final), []).usage == Usage(input_tokens=7, output_tokens=9)


def test_a_stream_without_usage_reads_none() -> None:
    reader = read(sse(chunk(), chunk()), [])
    assert reader.usage is None and reader.done


def test_a_cut_stream_is_not_done_and_an_error_event_is_kept() -> None:
    reader = read(sse(chunk(), {"error": {"message": "overloaded"}}, done=False), [])
    assert not reader.done
    assert reader.error == {"message": "overloaded"}


def test_anthropic_cache_fields_and_reported_cost() -> None:
    usage = Usage.from_mapping(
        {
            "prompt_tokens": 1500,
            "completion_tokens": 40,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 200,
            "cost": 0.0042,
        }
    )
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (1500, 1000, 200)
    assert usage.reported_cost == 0.0042


def test_anthropic_messages_spelling_counts_cache_in_input() -> None:
    usage = Usage.from_mapping(
        {"input_tokens": 300, "output_tokens": 40, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200}
    )
    assert usage.input_tokens == 1500 and usage.output_tokens == 40


def test_body_usage() -> None:
    assert usage_from_body({"usage": {"prompt_tokens": 5, "completion_tokens": 2}}) == Usage(5, 2)
    assert usage_from_body({"choices": []}) is None
    assert usage_from_body("not a body") is None


def test_usages_add_up() -> None:
    assert Usage(1, 2, 3, 4, 5) + Usage(10, 20, 30, 40, 50) == Usage(11, 22, 33, 44, 55)


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_text_and_reasoning_pieces_are_passed_on_in_order_whatever_the_split(cuts: list[int]) -> None:
    thinking = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"reasoning_content": "Hmm. "}}]}
    data = sse(thinking, chunk("Hel"), chunk("lo"), {"id": "c", "model": "m", "choices": [], "usage": USAGE})
    pieces: list[tuple[str, str]] = []
    reader = StreamUsageReader(on_text=lambda kind, piece: pieces.append((kind, piece)))
    edges = [0, *sorted({min(c, len(data)) for c in cuts}), len(data)]
    for start, end in itertools.pairwise(edges):
        reader.feed(data[start:end])
    reader.close()
    assert pieces == [("reasoning", "Hmm. "), ("text", "Hel"), ("text", "lo")]
    assert reader.usage is not None and reader.usage.input_tokens == 100


def test_the_model_that_answered_is_the_first_one_named_azures_filter_chunk_names_none() -> None:
    """Azure OpenAI's stream starts with its prompt filter's results, naming no model."""
    prompt_filter = {"id": "", "model": "", "choices": [], "prompt_filter_results": [{"prompt_index": 0}]}
    reader = StreamUsageReader()
    reader.feed(sse(prompt_filter, chunk("hi", model="gpt-4o-2024-11-20"), chunk("!", model="gpt-4o-2024-11-20")))
    assert reader.model == "gpt-4o-2024-11-20"
