"""What a room spec may hold: every spec that validates can be stored and run."""

from __future__ import annotations

import pytest

from shared.keys import check_room_id


def test_a_room_id_with_a_trailing_newline_is_refused():
    assert check_room_id("launch-panel-1") == "launch-panel-1"
    with pytest.raises(ValueError, match="invalid room id"):
        check_room_id("launch-panel-1\n")
