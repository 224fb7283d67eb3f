"""side_by_side: two executors' streams at once, each item tagged with its stream."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from kernelgate.audit.executors import side_by_side


def test_items_of_both_streams_come_as_each_is_ready_tagged_with_their_stream() -> None:
    first_sent = threading.Event()

    def slow() -> Iterator[str]:
        first_sent.wait(timeout=10)  # only yields once the other stream has
        yield "slow"

    def quick() -> Iterator[str]:
        yield "quick"
        first_sent.set()
        yield "quick again"

    items = list(side_by_side(slow(), quick()))
    assert items[0] == (1, "quick") and sorted(items) == [
        (0, "slow"),
        (1, "quick"),
        (1, "quick again"),
    ]


def test_an_exception_in_a_stream_reaches_the_caller() -> None:
    def broken() -> Iterator[int]:
        yield 1
        raise RuntimeError("executor broke")

    with pytest.raises(RuntimeError, match="executor broke"):
        list(side_by_side(broken(), iter([2, 3])))


def test_a_caller_that_stops_early_closes_the_streams() -> None:
    closed = threading.Event()

    def endless() -> Iterator[int]:
        try:
            while True:
                yield 0
                time.sleep(0.01)
        finally:  # LocalExecutor's judge_all cancels the judges it has not started here
            closed.set()

    stream = side_by_side(endless())
    assert next(stream) == (0, 0)
    stream.close()
    assert closed.wait(timeout=10)
