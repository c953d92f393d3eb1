"""Speaker lines, the shared rule behind quoting in prompts and cutting replies: properties
over arbitrary text, so that no message can slip a speaker line past either."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from parley.shared.speakers import QUOTE, first_speaker_line, quote_speaker_lines

NAMES = ["Optimist", "Budget Checker", "User"]
# Text built from the pieces a forged line is made of, so that the properties meet them.
PIECES = st.sampled_from(["Optimist", "optimist", "Budget_Checker", "budget checker", "User",
                          ":", "\uff1a", "**", "__", " ", "\t", "\n", "\r", "\u2028", "\u200b",
                          "> ", "(role)", "x", "Note", "10:30", "-", "\u00ad", "\u041eptimist",
                          "0ptimist", "Optimist.", "Optim\u200bist", "\u202e"])
TEXT = st.lists(PIECES, max_size=30).map("".join) | st.text(max_size=200)


@given(TEXT)
def test_quoted_text_has_no_speaker_line_left(text):
    assert first_speaker_line(quote_speaker_lines(text, NAMES), NAMES) is None


@given(TEXT)
def test_quoting_only_inserts_quote_marks(text):
    quoted = quote_speaker_lines(text, NAMES)
    assert quoted.replace(QUOTE, "") == text.replace(QUOTE, "")
    assert len(quoted) - len(text) == len(QUOTE) * (quoted.count(QUOTE) - text.count(QUOTE))


@given(TEXT)
def test_a_speaker_line_is_found_at_a_line_start_under_a_listed_name(text):
    found = first_speaker_line(text, NAMES)
    if found is not None:
        start, name = found
        assert start == 0 or text[start - 1] in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
        assert name in NAMES


def test_a_long_run_of_spaces_and_emphasis_is_matched_in_linear_time():
    hostile = ("\n" + " " * 50_000 + "*_" * 25_000 + "x" + "\nOptimist" + " _" * 25_000) * 4
    started = time.monotonic()
    assert first_speaker_line(hostile, NAMES) is None
    assert quote_speaker_lines(hostile, NAMES) == hostile
    assert time.monotonic() - started < 5
