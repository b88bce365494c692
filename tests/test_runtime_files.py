"""The runtime files (runtime/README.md): code that generated output carries verbatim.

Checked here: how a file is cut along its section markers (what is kept is byte for byte the file's own
text; a marker out of place is one ValueError naming its line), and that the descriptor-field ranges the
Ascend C lowering proves against are the ones the shipped runtime header narrows with. The generated
folders show the cut files byte for byte (tests/test_generated.py); the real-header check and the twins
compile the shipped header as it is (tests/test_ascend_headers.py, tests/test_twin_rows.py).
"""

from __future__ import annotations

import re

import pytest

from tilegen.backends import ascendc
from tilegen.core.resources import drop_sections, runtime_text, section

TEXT = "a\n// tilegen:section x (why)\nb\n// tilegen:end x\nc\n// tilegen:section y\nd\n// tilegen:end y\ne\n"


def test_drop_sections_keeps_the_named_sections_byte_for_byte():
    assert drop_sections(TEXT, {"x", "y"}) == "a\nb\nc\nd\ne\n"
    assert drop_sections(TEXT, {"y"}) == "a\nc\nd\ne\n"
    assert drop_sections(TEXT, set()) == "a\nc\ne\n"
    assert section(TEXT.replace("//", "#"), "y") == "d"


@pytest.mark.parametrize(
    "text, line",
    [
        ("// tilegen:section x\n// tilegen:section y\n// tilegen:end y\n// tilegen:end x\n", 2),  # nested
        ("a\n// tilegen:end x\n", 2),  # not opened
        ("// tilegen:section x\n// tilegen:end y\n", 2),  # closes another
    ],
)
def test_a_marker_out_of_place_is_one_error_naming_its_line(text, line):
    with pytest.raises(ValueError, match=rf"^line {line}: .* out of place"):
        drop_sections(text, {"x"})


def test_an_unclosed_section_or_a_missing_one_is_refused():
    with pytest.raises(ValueError, match="section 'x' is not closed"):
        drop_sections("// tilegen:section x\na\n", {"x"})
    with pytest.raises(ValueError, match="no section 'z'"):
        section(TEXT, "z", "//")


def test_field_ranges_are_the_ones_the_shipped_header_narrows_with():
    """FIELDS against the header's structs read by an independent pattern (one struct = a comment line,
    then `struct NAME {` with `using T`, `lo`, `hi`): the same names, types and bounds."""
    header = runtime_text("ascendc", "tilegen_runtime.h")
    structs = re.findall(r"struct (\w+) \{\s+using T = (\w+);\s+static constexpr int64_t lo = (-?\d+)LL;\s+"
                         r"static constexpr int64_t hi = (-?\d+)LL;", header)
    assert len(structs) >= 20
    narrowed = set(re.findall(r"TILEGEN_NARROW\((\w+_\w+), ", header)) - {"Struct_member"}  # uses, not the macro's own text
    for name, ctype, lo, hi in structs:
        f = ascendc.FIELDS[name]
        assert (f.ctype, f.lo, f.hi) == (ctype, int(lo), int(hi)), name
    assert narrowed <= {s[0] for s in structs}, "a field the header narrows has no range struct"
    assert {n for n, f in ascendc.FIELDS.items() if f.ctype != "float"} == {s[0] for s in structs}


def test_a_field_struct_out_of_form_is_refused():
    header = runtime_text("ascendc", "tilegen_runtime.h")
    broken = header.replace("    using T = uint16_t;\n", "    using T = uint16_t;  // moved\n", 1)
    with pytest.raises(ValueError, match="namespace field: not a field struct"):
        ascendc.header_fields(broken)
    with pytest.raises(ValueError, match="has no 'namespace field"):
        ascendc.header_fields("// nothing\n")
