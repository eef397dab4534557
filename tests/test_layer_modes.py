"""The layer seam's modes as pure transitions (`gnnorch.trim.state`), alone: no model, no seam."""
import itertools

import pytest

from gnnorch.trim.state import (Action, Mode, Step, check_result, enter, forward_end,
                                non_seed_read, self_trimming)


def _never() -> bool:
    raise AssertionError("may_speculate asked when it does not matter")


def _enter(check=None, trim_enabled=True, has_layout=True, layers_known=False, trims=False,
           may_speculate=_never):
    return enter(check=check, trim_enabled=trim_enabled, has_layout=has_layout,
                 layers_known=layers_known, trims=trims, may_speculate=may_speculate)


# -- model boundary entered ---------------------------------------------------------------
def test_a_requested_mode_wins_over_everything():
    for mode, enabled, layout, known, trims in itertools.product(
            Mode, (True, False), (True, False), (True, False), (True, False)):
        assert _enter(mode, enabled, layout, known, trims) is mode


def test_plain_without_trimming_or_without_a_hop_layout():
    for known, trims in itertools.product((True, False), (True, False)):
        assert _enter(trim_enabled=False, layers_known=known, trims=trims) is Mode.PLAIN
        assert _enter(has_layout=False, layers_known=known, trims=trims) is Mode.PLAIN


def test_a_first_forward_speculates_only_when_allowed():
    assert _enter(may_speculate=lambda: True) is Mode.SPECULATE
    assert _enter(may_speculate=lambda: False) is Mode.CALIBRATE


def test_a_known_model_trims_or_not():
    assert _enter(layers_known=True, trims=True) is Mode.TRIM
    assert _enter(layers_known=True, trims=False) is Mode.PLAIN


# -- self-trimming detected ---------------------------------------------------------------
def test_self_trimming_before_any_layer_call_hands_the_forward_to_pyg():
    assert self_trimming(Mode.TRIM, 0) == Step(Mode.PLAIN, Action.DISABLE)
    assert self_trimming(Mode.SPECULATE, 0) == Step(Mode.PLAIN, Action.DISABLE)
    # the check's trimmed forward stays a check forward (no hooks, no row statistics)
    assert self_trimming(Mode.CHECK_TRIM, 0) == Step(Mode.CHECK_PLAIN, Action.DISABLE)


def test_self_trimming_later_or_in_untrimmed_modes_is_only_noted():
    for mode in Mode:
        assert self_trimming(mode, 2) == Step(mode, Action.NOTE_PROBLEM)
    for mode in (Mode.PLAIN, Mode.CALIBRATE, Mode.CHECK_PLAIN):
        assert self_trimming(mode, 0) == Step(mode, Action.NOTE_PROBLEM)


# -- forward ended --------------------------------------------------------------------------
def test_check_forwards_only_record_what_they_met():
    for mode in (Mode.CHECK_PLAIN, Mode.CHECK_TRIM):
        assert forward_end(mode, calls=2, layers=2, problem=None) == Step(mode, Action.NONE)
        assert forward_end(mode, calls=3, layers=2, problem=None).action is Action.RECORD_CHECK
        assert forward_end(mode, calls=2, layers=2, problem="x").action is Action.RECORD_CHECK


def test_untrimmed_forwards_keep_their_output():
    assert forward_end(Mode.PLAIN, calls=5, layers=2, problem="x") == \
        Step(Mode.PLAIN, Action.COUNT_UNTRIMMED)
    assert forward_end(Mode.CALIBRATE, calls=0, layers=None, problem=None) == \
        Step(Mode.CALIBRATE, Action.LEARN)


def test_a_speculated_forward_is_verified_or_replayed_to_learn_k():
    assert forward_end(Mode.SPECULATE, calls=3, layers=3, problem=None) == \
        Step(Mode.SPECULATE, Action.VERIFY)
    # unexpected layer count, or a problem: replayed untrimmed from its RNG state, K relearnt
    assert forward_end(Mode.SPECULATE, calls=2, layers=3, problem=None) == \
        Step(Mode.CALIBRATE, Action.REPLAY_RELEARN)
    assert forward_end(Mode.SPECULATE, calls=3, layers=3, problem="rows") == \
        Step(Mode.CALIBRATE, Action.REPLAY_RELEARN)


def test_a_trimmed_forward_is_served_or_recomputed():
    assert forward_end(Mode.TRIM, calls=2, layers=2, problem=None) == \
        Step(Mode.TRIM, Action.SERVE_TRIMMED)
    assert forward_end(Mode.TRIM, calls=3, layers=2, problem=None) == \
        Step(Mode.PLAIN, Action.RECOMPUTE)
    assert forward_end(Mode.TRIM, calls=2, layers=2, problem="rows") == \
        Step(Mode.PLAIN, Action.RECOMPUTE)


# -- first-batch check, non-seed read -------------------------------------------------------
def test_the_check_on_a_speculated_forward_decides_its_output():
    assert check_result(Mode.SPECULATE, True) == Step(Mode.TRIM, Action.SERVE_TRIMMED)
    assert check_result(Mode.SPECULATE, False) == Step(Mode.PLAIN, Action.REPLAY)
    with pytest.raises(ValueError):
        check_result(Mode.CALIBRATE, True)


def test_reading_beyond_the_seeds_recomputes_untrimmed():
    assert non_seed_read(Mode.TRIM) == Step(Mode.PLAIN, Action.RECOMPUTE)
    with pytest.raises(ValueError):
        non_seed_read(Mode.PLAIN)


def test_every_recomputation_re_enters_in_a_mode_that_cannot_recompute_again_unbounded():
    """A recomputation re-enters the model in the step's mode; from there no forward end
    may ask for another recomputation in the same mode (no re-entry loop)."""
    recompute = {Action.RECOMPUTE, Action.REPLAY, Action.REPLAY_RELEARN}
    steps = [forward_end(m, calls=c, layers=k, problem=p)
             for m in Mode for c, k, p in itertools.product((0, 2), (None, 2), (None, "x"))]
    steps += [check_result(Mode.SPECULATE, ok) for ok in (True, False)]
    steps += [non_seed_read(Mode.TRIM)]
    for step in steps:
        if step.action in recompute:
            assert step.mode in (Mode.PLAIN, Mode.CALIBRATE)
            again = {forward_end(step.mode, calls=c, layers=k, problem=p).action
                     for c, k, p in itertools.product((0, 2), (None, 2), (None, "x"))}
            assert not again & recompute


def test_mode_properties():
    assert {m for m in Mode if m.checking} == {Mode.CHECK_PLAIN, Mode.CHECK_TRIM}
    assert {m for m in Mode if m.untrimmed} == {Mode.PLAIN, Mode.CHECK_PLAIN}
    assert {m for m in Mode if m.compact} == {Mode.TRIM, Mode.CHECK_TRIM}
