"""`regrow bench grade`'s headline ratio pairs each task's grading with its own bare run (no Docker)."""

from regrow.bench.grading import paired_ratio


def test_the_ratio_is_all_grading_over_all_bare_runs_of_the_same_tasks():
    # session 32's h11 run: a median of each side read 1.587, pairing one task's grading with another's bare run
    bare, graded = [2.52, 2.864, 2.535], [4.117, 4.022, 3.58]
    assert round(paired_ratio(bare, graded), 3) == 1.48
    assert paired_ratio([1.0, 10.0], [2.0, 10.0]) == 12.0 / 11.0  # a slow suite weighs as much as it costs
