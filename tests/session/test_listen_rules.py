"""The listen-state table itself: complete, and the copy in docs/protocol.md is the code's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from wren.pipeline.turn_detection import ListenMode
from wren.session.listen_rules import TABLE, Action, ListenEvent, ListenState, action, markdown_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"

# Cells that cannot happen: the VAD reports nothing while not listening, and a reply cannot end while one
# is still in progress (speaking) — the next one is then already on its way.
IMPOSSIBLE = {
    (ListenEvent.ONSET, ListenState.IDLE), (ListenEvent.ONSET, ListenState.SPEAKING),
    (ListenEvent.INPUT_END, ListenState.IDLE), (ListenEvent.INPUT_END, ListenState.SPEAKING),
    (ListenEvent.NO_SPEECH, ListenState.IDLE), (ListenEvent.NO_SPEECH, ListenState.SPEAKING),
    (ListenEvent.REPLY_ENDED, ListenState.SPEAKING), (ListenEvent.REPLY_ENDED, ListenState.BOTH),
}


def test_the_docs_show_the_table_the_code_uses():
    text = DOC.read_text()
    shown = re.search(r"<!-- listen-table:start -->\n(.*?)\n<!-- listen-table:end -->", text, re.S)
    assert shown is not None, "docs/protocol.md lost its listen table markers"
    assert shown.group(1).strip() == markdown_table()


@pytest.mark.parametrize("event", list(ListenEvent))
@pytest.mark.parametrize("state", list(ListenState))
@pytest.mark.parametrize("mode", list(ListenMode))
def test_every_possible_cell_has_a_rule(event, state, mode):
    if (event, state) in IMPOSSIBLE:
        assert (event, state, mode) not in TABLE
        assert action(event, state, mode) is Action.NOTHING
    else:
        assert (event, state, mode) in TABLE


def test_the_modes_differ_only_where_the_protocol_says_so():
    differing = {(e, s) for (e, s, _m) in TABLE if len({TABLE[(e, s, m)] for m in ListenMode}) > 1}
    assert differing == {
        (ListenEvent.TYPED, ListenState.LISTENING), (ListenEvent.TYPED, ListenState.BOTH),
        (ListenEvent.ONSET, ListenState.BOTH),
        (ListenEvent.INPUT_END, ListenState.LISTENING), (ListenEvent.INPUT_END, ListenState.BOTH),
        (ListenEvent.NO_SPEECH, ListenState.LISTENING), (ListenEvent.NO_SPEECH, ListenState.BOTH),
        (ListenEvent.REPLY_ENDED, ListenState.IDLE),
    }


def test_state_of_listening_and_speaking():
    assert ListenState.of(False, False) is ListenState.IDLE
    assert ListenState.of(True, False) is ListenState.LISTENING
    assert ListenState.of(False, True) is ListenState.SPEAKING
    assert ListenState.of(True, True) is ListenState.BOTH
