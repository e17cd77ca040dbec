"""Text from the bus, printable: every control character and bidirectional mark shown as its
escape, everything else as it was."""

from __future__ import annotations

import msgspec
import pytest

from placewatch.schemas.printable import printable, printable_json, printable_values

HOSTILE = "gpu\x1b]0;pwned\x07\u202e-07\nsecond line"
"""A node name that retitles a terminal, rings, reverses what follows and breaks the line."""


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("\x1b", r"\x1b"),
        ("\x07", r"\x07"),
        ("\x00", r"\x00"),
        ("\t", r"\t"),
        ("\n", r"\n"),
        ("\r", r"\r"),
        ("\x7f", r"\x7f"),
        ("\x9b", r"\x9b"),  # CSI, as one C1 character
        ("\x85", r"\x85"),  # NEL
        ("\u061c", r"\u061c"),
        ("\u200e", r"\u200e"),
        ("\u200f", r"\u200f"),
        ("\u2028", r"\u2028"),
        ("\u2029", r"\u2029"),
        *((chr(c), f"\\u{c:04x}") for c in range(0x202A, 0x202F)),
        *((chr(c), f"\\u{c:04x}") for c in range(0x2066, 0x206A)),
    ],
)
def test_each_control_character_and_bidirectional_mark_is_shown_as_its_escape(
    given: str, shown: str
) -> None:
    assert printable(f"a{given}b") == f"a{shown}b"


def test_a_hostile_name_becomes_one_line_of_plain_text() -> None:
    shown = printable(HOSTILE)
    assert shown == r"gpu\x1b]0;pwned\x07\u202e-07\nsecond line"
    assert shown.isprintable()


@pytest.mark.parametrize(
    "text", ["gpu-07", "llama-3.1-8b", "nœud ünïcode 节点", "back\\slash", 'a "quoted" one', ""]
)
def test_printable_text_is_left_as_it_is(text: str) -> None:
    assert printable(text) is text


def test_every_string_of_a_document_is_made_printable_keys_too() -> None:
    document = {"node": HOSTILE, "evidence": ("a\nb", 3), HOSTILE: [None, 1.5, True]}
    assert printable_values(document) == {
        "node": printable(HOSTILE),
        "evidence": [r"a\nb", 3],
        printable(HOSTILE): [None, 1.5, True],
    }


UNPRINTABLE_CHARACTERS = [
    *map(chr, range(0x20)),
    *map(chr, range(0x7F, 0xA0)),
    "\u061c",
    "\u200e",
    "\u200f",
    "\u2028",
    "\u2029",
    *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
]


@pytest.mark.parametrize("c", UNPRINTABLE_CHARACTERS, ids=lambda c: f"U+{ord(c):04X}")
def test_a_json_document_holds_each_unprintable_character_escaped_in_a_key_or_a_value(
    c: str,
) -> None:
    value = {"node": f"a{c}b", "gpus": [1, None]}
    key = {"verdicts": {f"a{c}b": 2}}
    assert msgspec.json.decode(printable_json(value)) == {
        "node": printable(f"a{c}b"),
        "gpus": [1, None],
    }
    assert msgspec.json.decode(printable_json(key)) == {"verdicts": {printable(f"a{c}b"): 2}}
    for document in (value, key):
        assert printable_json(document) == msgspec.json.encode(printable_values(document))


@pytest.mark.parametrize(
    "document",
    [
        {"node": "gpu-07", "gpus": [{"index": 0, "problems": []}], "verdicts": {"gpu": 4}},
        {"reason": "nœud ünïcode 节点 \u00a0", "evidence": ("back\\nslash", 'a "quoted" one')},
        {"t": [1.5, None, True, "\\u001b"]},
    ],
)
def test_a_json_document_without_them_is_encoded_as_it_is(document: dict[str, object]) -> None:
    assert printable_json(document) == msgspec.json.encode(printable_values(document))
    assert printable_json(document) == msgspec.json.encode(document)
