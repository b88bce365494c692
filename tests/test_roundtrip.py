"""The printer and the parser are inverses: for every built-in spec, on the interpreter, Ascend (910B2)
and GPU (H200) targets, forward and backward, the program after EVERY pass of the list parses back from
its text to an equal program (dataclass equality, field by field: sympy expressions, annotations, mods),
and printing that gives the same text. The reference is the compiled program itself: a field the
printer leaves out, or prints lossily, makes the parsed program differ from it.

Bad text gives one-line :class:`ParseError` s naming the line number, the text and what was expected.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import sympy

from tilegen.backends import compile_backward, compile_forward
from tilegen.core.annotations import Annotation
from tilegen.core.ir import Br, Loop, Sq, walk
from tilegen.core.parser import ParseError, parse_program
from tilegen.core.printer import format_program
from tilegen.core.spec import builtin_spec, builtin_specs
from tilegen.passes.driver import PassLog

TARGETS = (None, "ascend910b2", "h200", "h200 rows")  # "h200 rows": as generate emits it (select-row)


def _first_difference(a, b, path: str = "program") -> str:
    """Where two IR values first differ (a field path), for the failure message."""
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} {a!r} != {type(b).__name__} {b!r}"
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if x != y:
                return _first_difference(x, y, f"{path}.{f.name}")
    if isinstance(a, tuple) and len(a) == len(b):
        for n, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{n}]")
    return f"{path}: {a!r} != {b!r}"


def _steps(name: str, target, which: str):
    log = PassLog()
    spec = builtin_spec(name)
    if target == "h200 rows":  # the target's measured rows, select-row's choice: the program the module renders
        from tilegen.backends.triton import emitted
        from tilegen.core.targets import load_target

        emitted(spec, which, load_target("h200"), log=log)
    elif which == "fwd":
        compile_forward(spec, target=target, log=log)
    else:
        compile_backward(spec, target=target, log=log)
    return log.steps


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t or "interp")
@pytest.mark.parametrize("name", sorted(builtin_specs()))
def test_every_pass_result_round_trips(name, target):
    checked: dict[str, object] = {}
    for which in ("fwd", "bwd"):
        steps = _steps(name, target, which)
        assert steps, f"{name} {which}: no pass recorded"
        for step, program in steps:
            text = format_program(program)
            if checked.get(text) == program:  # an unchanged program (the pass did not act): checked already
                continue
            checked[text] = program
            parsed = parse_program(text)
            assert parsed == program, f"{name} {target} {which}, after {step}: {_first_difference(parsed, program)}"
            assert format_program(parsed) == text, f"{name} {target} {which}, after {step}: the parsed program prints differently"


def _tiny_ascend_bwd():
    return compile_backward(builtin_spec("tiny"), target="ascend910b2")


def test_every_field_shows_in_the_text():
    """A change to any one field of a node changes the printed text (spot checks of the fields the
    loop-nest form used to leave out: a loop's role and domain, a buffer's unit, the full scale, a
    tensor's layout, a ModOp's tensors)."""
    program = _tiny_ascend_bwd()
    text = format_program(program)
    loops = [s for k in program.kernels for s, _ in walk(k.body) if isinstance(s, Loop)]
    loop = next(lp for lp in loops if lp.domain)
    kernel = next(k for k in program.kernels if any(s == loop for s, _ in walk(k.body)))

    def with_loop(new):
        from tilegen.core.ir import map_body

        body = map_body(kernel.body, lambda s: new if s == loop else s)
        return dataclasses.replace(program, kernels=tuple(dataclasses.replace(k, body=body) if k is kernel else k for k in program.kernels))

    changed = [
        with_loop(dataclasses.replace(loop, role="batch")),
        with_loop(dataclasses.replace(loop, domain="other")),
        with_loop(dataclasses.replace(loop, note="another note")),
        dataclasses.replace(program, scale=program.scale * (1 + 1e-12)),
        dataclasses.replace(program, tensors=(dataclasses.replace(program.tensors[0], layout="BSND"),) + program.tensors[1:]),
        dataclasses.replace(program, attrs=program.attrs + (("extra", None),)),
    ]
    for other in changed:
        assert other != program
        new_text = format_program(other)
        assert new_text != text
        assert parse_program(new_text) == other


@dataclass(frozen=True)
class _Probe(Annotation, key="test_roundtrip_probe", on=("Loop", "Buffer")):
    """An annotation of every field kind the printer writes, registered here only: the parser knows
    no annotation by name."""

    count: int
    word: str = "a 'quoted' word, with (brackets)"
    flags: tuple = (True, False, None)
    size: sympy.Expr = sympy.Integer(0)
    ratio: float = 0.1


def test_any_registered_annotation_round_trips():
    program = _tiny_ascend_bwd()
    probe = _Probe(3, size=Br * 2 + Sq, ratio=1 / 3)
    kernel = program.kernels[0]
    buffers = (kernel.buffers[0].annotate(probe),) + kernel.buffers[1:]
    body = (kernel.body[0].annotate(_Probe(0)),) + kernel.body[1:]
    other = dataclasses.replace(program, kernels=(dataclasses.replace(kernel, buffers=buffers, body=body),) + program.kernels[1:])
    text = format_program(other)
    assert "@test_roundtrip_probe(count=3, word=\"a 'quoted' word, with (brackets)\", flags=(True, False, None), size=2*Br + Sq, ratio=0.3333333333333333)" in text
    assert parse_program(text) == other


@pytest.mark.parametrize(
    "edit, line, expected",
    [
        (lambda t: t.replace("program tiny.fwd  [", "programme tiny.fwd  ["), 1, "expected `program NAME  [attr=value, ...]`"),
        (lambda t: t.replace("  scale = ", "  scales = "), 2, "expected `  scale = X;"),
        (lambda t: t.replace("  tensors:\n", ""), 4, "expected `  tensors:`"),
        (lambda t: t.replace("[B, Hq, Sq, Dqk]  fp16  HBM", "[B, Hq, Sq, Dqk]  fp16  GM"), None, "expected a tensor `NAME  [shape]  dtype  HBM kind  [layout]`"),
        (lambda t: t.replace("= rowmax(", "= rowmean("), None, "expected an operation (fill, rowmax, rowsum, mask, mod_<op>"),
        (lambda t: t.replace("@wait_at_read", "@wait_at_reed", 1), None, "expected no annotation @wait_at_reed; known:"),
        (lambda t: t.replace("@n_chunk(width=", "@n_chunk(depth=", 1), None, "expected `field=value` with a field of @n_chunk (width)"),
        (lambda t: t.replace("Br*i:+Br", "Br*i:+(Br", 1), None, "expected a tensor tile `T[i, start:+size, ...]`"),
        (lambda t: t.replace("@deal(order='snake')", "@cut_only", 1), None, "expected annotations of a Kernel (@cut_only annotates Mask)"),
    ],
)
def test_bad_text_is_a_one_line_parse_error(edit, line, expected):
    text = format_program(compile_forward(builtin_spec("tiny"), target="ascend910b2"))
    bad = edit(text)
    assert bad != text
    with pytest.raises(ParseError) as err:
        parse_program(bad)
    message = str(err.value)
    assert "\n" not in message and expected in message, message
    bad_line = next(n for n, (a, b) in enumerate(zip(bad.splitlines() + [""], text.splitlines()), 1) if a != b)
    assert message.startswith(f"line {line or bad_line}: `"), message
