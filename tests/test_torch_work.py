"""``AluminumWork`` over stand-in requests: its future is made on demand, completes once
every request is done and ``finish`` ran, and carries the first error."""
import pytest
import torch

import aluminum as al
from aluminum.torch import AluminumWork


class StandInRequest:
    """What AluminumWork uses of an ``al.Request``, completed by hand."""

    def __init__(self) -> None:
        self.done, self.error, self.callbacks = False, None, []

    def complete(self, error=None) -> None:
        self.done, self.error = True, error
        for fn in self.callbacks:
            fn(self)

    def wait(self, timeout=None) -> None:
        if not self.done:
            self.complete()
        self.test()

    def test(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.done

    def add_done_callback(self, fn) -> None:
        self.callbacks.append(fn)
        if self.done:
            fn(self)


def make_work(count=2):
    requests = [StandInRequest() for _ in range(count)]
    result = [torch.zeros(2)]
    finished = []
    work = AluminumWork(requests, result, lambda: finished.append(result[0].add_(1)))
    return work, requests, result, finished


def test_a_future_asked_for_early_completes_after_the_last_request_and_finish():
    work, requests, result, finished = make_work()
    future = work.get_future()
    assert work.get_future() is future
    requests[0].complete()
    assert not future.done() and not work.is_completed() and finished == []
    requests[1].complete()
    assert future.done() and future.value() is result
    assert torch.equal(result[0], torch.ones(2))   # finish ran before the future completed
    assert work.wait() is True and len(finished) == 1


def test_a_future_asked_for_after_wait_is_already_complete():
    work, requests, result, finished = make_work()
    assert work.wait() is True
    assert work.is_completed() and work.is_success() and work.exception() is None
    future = work.get_future()
    assert future.done() and future.value() is result and len(finished) == 1


def test_is_completed_settles_without_a_wait():
    work, requests, _, finished = make_work()
    assert not work.is_completed()
    for request in requests:
        request.complete()
    assert work.is_completed() and work.is_success() and len(finished) == 1


def test_a_failed_request_fails_wait_the_future_and_skips_finish():
    work, requests, _, finished = make_work()
    future = work.get_future()
    error = al.OperationError("allreduce failed")
    requests[0].complete(error)
    requests[1].complete()
    with pytest.raises(al.OperationError, match="allreduce failed"):
        future.wait()
    with pytest.raises(al.OperationError, match="allreduce failed"):
        work.wait()
    assert work.is_completed() and not work.is_success() and work.exception() is error
    assert finished == []


def test_a_work_without_requests_completes_on_demand():
    work, _, result, finished = make_work(count=0)
    assert work.get_future().value() is result and len(finished) == 1
