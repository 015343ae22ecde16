"""User story: a long output keeps its final answer: a text over the limit loses its middle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen._sanitize import TRUNCATION_MARKER, TRUNCATION_PATTERN, clean_extra, clean_text, cut_middle
from otel_valgen.cli.main import main
from otel_valgen.reader import Generation, ReadError, read_paths
from otel_valgen.testing import capture_records

MARKER_BYTES = len(TRUNCATION_MARKER.format(omitted="").encode())  # 29, without the count's digits

characters = st.one_of(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E),  # ASCII: 1 byte
    st.characters(min_codepoint=0xE9, max_codepoint=0x17F),  # Latin: 2 bytes
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),  # CJK: 3 bytes
    st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF),  # emoji: 4 bytes (a surrogate pair in UTF-16)
    st.integers(0xD800, 0xDFFF).map(chr),  # lone surrogates: repaired to U+FFFD before the cut
    st.just("\n"),
)


def _repaired(text: str) -> str:
    return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)


def _parts(text: str) -> tuple[str, int, str]:
    """(head, count of characters omitted, tail) of a cut text."""
    (match,) = TRUNCATION_PATTERN.finditer(text)
    return text[: match.start()], int(match[1]), text[match.end() :]


@settings(max_examples=400, deadline=None)
@given(text=st.text(characters, max_size=300), limit=st.integers(1, 700))
def test_a_cut_keeps_a_prefix_and_a_suffix_within_the_limit(text: str, limit: int) -> None:
    """Valid UTF-8 of at most the limit: a prefix, the marker with the exact count left out, a suffix."""
    whole = _repaired(text)
    size = len(whole.encode())
    cleaned = clean_text(text, limit)
    sent = cleaned.text.encode("utf-8")  # valid: no lone surrogate, no split character
    assert len(sent) <= limit
    if size <= limit:
        assert (cleaned.text, cleaned.original_length) == (whole, None)
        return
    assert cleaned.original_length == size
    assert len(sent) >= limit - 3  # only the bytes of one character a cut would split stay unused
    if limit < MARKER_BYTES + len(str(len(whole))):  # no room for the marker: the head alone
        assert whole.startswith(cleaned.text)
        return
    head, omitted, tail = _parts(cleaned.text)
    assert whole.startswith(head)
    assert whole.endswith(tail)
    assert omitted == len(whole) - len(head) - len(tail) > 0
    budget = limit - MARKER_BYTES - len(str(omitted))
    assert budget // 2 - 3 <= len(head.encode()) <= budget // 2  # half the budget each
    assert len(tail.encode()) <= budget - len(head.encode())


@settings(max_examples=100, deadline=None)
@given(data=st.binary(min_size=1, max_size=400), limit=st.integers(40, 300))
def test_undecodable_bytes_are_repaired_then_cut(data: bytes, limit: int) -> None:
    """Bytes are decoded (bad ones as U+FFFD) first; the count is of the repaired text's characters."""
    whole = data.decode("utf-8", "replace")
    cleaned = clean_text(data, limit)
    assert len(cleaned.text.encode()) <= limit
    if len(whole.encode()) > limit:
        head, omitted, tail = _parts(cleaned.text)
        assert (whole.startswith(head), whole.endswith(tail)) == (True, True)
        assert omitted == len(whole) - len(head) - len(tail)


def test_the_cut_of_a_long_chain_of_thought() -> None:
    """Half of what the marker leaves is the head's, half the tail's; the count has as many digits as it needs."""
    text = "x" * 500 + "The answer is 42."
    cut = clean_text(text, 100).text
    # 100 bytes - the marker's 29 and 3 digits = 68: 34 each side; 517 - 68 = 449 omitted.
    assert cut == "x" * 34 + "\n…[449 characters omitted]…\n" + "x" * 17 + "The answer is 42."
    assert len(cut.encode()) == 100


def test_the_count_shrinks_to_its_own_digits_to_fill_the_limit() -> None:
    """A 70,000-character text (5 digits) cut at 64 KiB omits 4,497 (4 digits): the freed byte goes to the tail."""
    cut = clean_text("x" * 70_000, 65_536).text
    assert len(cut.encode()) == 65_536
    head, omitted, tail = _parts(cut)
    assert (len(head), omitted, len(tail)) == (32_751, 4_497, 32_752)


def test_characters_of_every_width_are_never_split() -> None:
    """Both cuts fall inside a character: each leaves it out whole (no U+FFFD), the tail takes the head's spare byte."""
    huge = "a" + "é" * 50_000  # 100,001 bytes; 50,001 characters (5 digits)
    cut = clean_text(huge, 1002).text  # budget 968: a 484-byte head would split an "é", so 483 bytes
    assert cut == "a" + "é" * 241 + "\n…[49517 characters omitted]…\n" + "é" * 242
    emoji = "🙂" * 100  # 400 bytes, 4 each
    head, omitted, tail = _parts(clean_text(emoji, 100).text)  # the head's 34 bytes: 8 of them
    assert (head, omitted, tail) == ("🙂" * 8, 83, "🙂" * 9)  # 2 digits: budget 69, the tail 37 bytes


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 30, 31])
def test_a_limit_smaller_than_the_marker_keeps_the_head_alone(limit: int) -> None:
    """Too small for the marker (29 bytes and the count): the longest head that fits, never split."""
    assert clean_text("€" * 100, limit).text == "€" * (limit // 3)  # 3 bytes each; 100 characters: 3 digits


def test_a_limit_just_above_the_marker_keeps_what_fits_around_it() -> None:
    """The marker alone when nothing else fits; then one character each side as soon as they do."""
    assert clean_text("€" * 100, 32).text == "\n…[100 characters omitted]…\n"
    assert clean_text("€" * 100, 36).text == "\n…[99 characters omitted]…\n€"  # too few bytes for a head
    assert clean_text("€" * 100, 37).text == "€\n…[98 characters omitted]…\n€"


def test_cut_middle_is_what_clean_text_sends() -> None:
    """The public helper gives the same text as a record's field."""
    text = "abc" * 1000
    assert cut_middle(text, text.encode(), 200) == clean_text(text, 200).text


def test_a_json_extra_keeps_its_first_and_last_items() -> None:
    """A JSON extra is cut like a text: its opening and its last items (and closing bracket) stay."""
    value = clean_extra(list(range(100_000)), 1024).value
    assert isinstance(value, str)
    assert len(value.encode()) <= 1024
    head, omitted, tail = _parts(value)
    assert head.startswith("[0,1,2,3,")
    assert tail.endswith(",99998,99999]")
    assert omitted == len(json.dumps(list(range(100_000)), separators=(",", ":"))) - len(head) - len(tail)


def test_a_long_text_extra_keeps_its_end() -> None:
    """A text extra over the limit keeps its end too, and counts in truncated_fields."""
    long = "judge reasoning " * 200 + "VERDICT: correct"
    with capture_records(run_id="r", count=4, max_field_bytes=500) as records, vg.validation(step=1):
        vg.log_generations(["q"], ["a"], None, extra={"judge": [long]})
    (record,) = [r for r in records if r["event_name"] == contract.EVENT_GENERATION]
    value = record["attributes"][contract.EXTRA_PREFIX + "judge"]
    assert value.endswith("VERDICT: correct")
    assert len(value.encode()) <= 500
    assert vg.stats()["truncated_fields"] == 1


def _unexpected(error: ReadError) -> None:
    raise AssertionError(error)


def test_a_200_kb_output_keeps_its_final_answer_through_the_embedded_sink(tmp_path: Path) -> None:
    """Through the SDK, the file sink and `otel-valgen show`: the answer line survives, with the original size."""
    reasoning = "".join(f"Step {i}: consider case {i} and check it against the constraints.\n" for i in range(3000))
    output = reasoning + "Final answer: \\boxed{1729}"
    assert len(output.encode()) > 200_000
    vg.configure(run_id="long", count=4, directory=str(tmp_path))
    with vg.validation(step=1):
        vg.log_generations(["Which number is the taxicab number?"], [output], [1.0])
    vg.shutdown()
    (generation,) = [r for r in read_paths([tmp_path], _unexpected) if isinstance(r, Generation)]
    assert generation.output.endswith("\nFinal answer: \\boxed{1729}")
    assert generation.output.startswith("Step 0: consider case 0")
    assert len(generation.output.encode()) <= 65_536
    head, omitted, tail = _parts(generation.output)
    assert omitted == len(output) - len(head) - len(tail)
    assert generation.attributes[contract.OUTPUT_LENGTH] == len(output.encode())
    shown = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "json"])
    assert shown.exit_code == 0, shown.output
    (line,) = shown.stdout.splitlines()
    assert json.loads(line)["generations"][0]["output"].endswith("Final answer: \\boxed{1729}")
