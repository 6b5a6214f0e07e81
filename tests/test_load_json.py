"""``load_json``, the one strict JSON read of files and lines (the store, ``selfrag eval``):
anything unreadable is a ``ValueError`` saying why, never a ``RecursionError``."""

from __future__ import annotations

import json

import pytest

from selfrag_core.errors import ParseError
from selfrag_core.parsing import load_json, parse_json


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 50_000 + "]" * 50_000, "nested deeper than the interpreter's recursion limit"),
        ('{"a": ' * 50_000 + "1" + "}" * 50_000, "nested deeper than the interpreter's recursion limit"),
        ("7" * 5_000, "an integer longer than 4300 digits"),
    ],
    ids=["arrays", "objects", "integer"],
)
def test_hostile_json_is_a_value_error_saying_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        load_json(text)
    assert not isinstance(caught.value, json.JSONDecodeError)
    with pytest.raises(ParseError):  # the model-output parser reads through it
        parse_json(text)


def test_malformed_json_keeps_its_position_and_strictness_is_asked_for() -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        load_json('{"a": 1,,}')
    assert (caught.value.lineno, caught.value.colno) == (1, 9)
    with pytest.raises(json.JSONDecodeError, match="control character"):
        load_json('"a\tb"')
    assert load_json('"a\tb"', strict=False) == "a\tb"
    assert load_json('{"deep": ' + "[" * 50 + "]" * 50 + "}") == {"deep": json.loads("[" * 50 + "]" * 50)}
