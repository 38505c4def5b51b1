"""Stop strings over a token stream: text is released as soon as it cannot start a stop string."""

from __future__ import annotations

from service.engine.stops import StopMatcher


def test_holds_back_only_a_possible_prefix():
    m = StopMatcher(["<|im_end|>"])
    assert m.feed("hello") == "hello"
    assert m.feed(" wor<") == " wor"  # "<" could start the stop string
    assert m.feed("|im") == ""
    assert m.feed("x!") == "<|imx!"  # it did not
    assert m.matched is None


def test_match_across_pieces_cuts_before_the_stop():
    m = StopMatcher(["END", "<|im_end|>"])
    out = "".join(m.feed(t) for t in ["hel", "lo E", "N", "x <", "|im_", "end|> more"])
    assert out == "hello ENx " and m.matched == "<|im_end|>"


def test_earliest_stop_wins_and_flush_returns_the_rest():
    m = StopMatcher(["b", "a"])
    assert m.feed("xxab") == "xx" and m.matched == "a"
    m = StopMatcher(["stop"])
    assert m.feed("sto") == "" and m.flush() == "sto"
