import pytest

from sglnode.bench.runner import StageSpec, shares_for, split_evenly


def test_split_evenly_gives_the_remainder_to_the_first_parts():
    assert split_evenly(10, 3) == [4, 3, 3]
    assert sum(split_evenly(7, 4)) == 7


def test_concurrency_and_requests_are_split_across_workers():
    shares = shares_for(StageSpec("c=5", 5, None, 11, 60.0), 2, seed=1)
    assert [s.concurrency for s in shares] == [3, 2]
    assert [s.num_requests for s in shares] == [6, 5]
    assert [s.seed for s in shares] == [1, 2]


def test_a_worker_without_slots_sends_nothing():
    shares = shares_for(StageSpec("c=1", 1, None, 8, 60.0), 2, seed=0)
    assert [s.num_requests for s in shares] == [8, 0]


def test_poisson_rates_add_up_to_the_stage_rate():
    shares = shares_for(StageSpec("r", None, 9.0, 10, 60.0), 3, seed=0)
    assert sum(s.rate for s in shares) == pytest.approx(9.0)
