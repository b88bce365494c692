"""MkDocs hooks: the reference pages generated from the code, so that they cannot drift from it.

- ``<!-- tilegen:spec-fields -->`` in a page becomes the table of every spec-file field: its type, what
  it accepts, its default, an example from a built-in spec and its meaning. What a field accepts is the
  validator's own words: each field is given a value it must refuse and the ``accepted`` of the
  :class:`~tilegen.core.errors.SpecError` it raises is printed; the meaning is the field's entry in the
  ``Attributes`` section of :class:`~tilegen.core.spec.AttentionSpec` (or of
  :class:`~tilegen.core.mods.ParamDecl` for a parameter table's keys). :func:`spec_field_rows` is the one
  function that reads the spec module; a field reference kept by the spec module itself can replace it.
- ``<!-- tilegen:cli -->`` becomes the reference of every ``tilegen`` command, read from the argument
  parser (:func:`tilegen.cli.build_parser`): usage, help and one row per option.
- The docstrings' Sphinx roles (``:func:`x```) are shown as the plain code they wrap.

The hook imports tilegen from this checkout (the folder above ``tools/``), not from another install.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SPEC_MARKER = "<!-- tilegen:spec-fields -->"
CLI_MARKER = "<!-- tilegen:cli -->"

# A spec the probes below change one field of at a time: every size distinct, so that a default copied
# from another field (heads_kv = heads_q) shows which one it is.
_BASE = {"batch": 1, "heads_q": 4, "seq_q": 64, "seq_k": 80, "head_dim_qk": 32}
# A value each field must refuse, for the validator to say what it accepts (a field not listed gets {}).
_REFUSED = {"window": [-5, 0], "mask": "none-such", "name": "", "score_mod": 5, "mask_mod": 5, "params": 5, "packed_ids": 5}
_SHORT_PAIRS = {"heads": ("heads_q", "heads_kv"), "seq": ("seq_q", "seq_k"), "head_dim": ("head_dim_qk", "head_dim_v")}


def _attributes(doc: str) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style docstring, as {name: text on one line}."""
    out: dict[str, str] = {}
    section = re.split(r"\n\s*Attributes:\s*\n", doc or "", maxsplit=1)
    if len(section) < 2:
        return out
    name = None
    for line in section[1].splitlines():
        m = re.match(r"^ {8}(\w+): ?(.*)$", line)
        if m:
            name = m.group(1)
            out[name] = m.group(2).strip()
        elif line.startswith(" " * 12) and name:
            out[name] += " " + line.strip()
        elif line.strip():
            break
    return out


def _refusal(data: dict) -> tuple[str, str]:
    """(field, accepted) of the error the spec loader raises for ``data``."""
    from tilegen.core.errors import SpecError, SpecErrors
    from tilegen.core.spec import spec_from_dict

    try:
        spec_from_dict(data)
    except SpecErrors as exc:
        err = exc.errors[0]
        return err.field, err.accepted
    except SpecError as exc:
        return exc.field, exc.accepted
    raise AssertionError(f"the spec loader accepted {data!r}: a probe of the field reference must be refused")


def _examples() -> dict[str, str]:
    """The first line of a built-in spec file that sets each key, e.g. ``heads = 32`` (for a params
    table's keys, ``params.NAME.KEY``)."""
    from tilegen.core.spec import builtin_specs, tomllib

    out: dict[str, str] = {}
    for name, path in sorted(builtin_specs().items()):
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else {}
        for line in text.splitlines():
            if line.startswith("[params.") and "params" not in out:
                out["params"] = line.strip()
            m = re.match(r"^(\w+)\s*=", line)
            if m and m.group(1) in data and m.group(1) not in out and len(line) <= 80:
                out[m.group(1)] = line.split("#")[0].strip()
        for decl in (data.get("params") or {}).values():
            for key, value in decl.items():
                shown = f"{key} = {_toml(value)}"
                if f"params.NAME.{key}" not in out and len(shown) <= 60:
                    out[f"params.NAME.{key}"] = shown
    return out


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def _type_of(example: str) -> str:
    value = example.split("=", 1)[1].strip() if "=" in example else ""
    if example.startswith("[params."):
        return "table"
    if value.startswith("["):
        return "array"
    if value.startswith('"'):
        return "string"
    if value in ("true", "false"):
        return "boolean"
    if re.fullmatch(r"-?\d+", value):
        return "integer"
    if value:
        return "number"
    return ""


@dataclasses.dataclass(frozen=True)
class FieldRow:
    """One field of a spec file: its key, TOML type, what it accepts, default, example and meaning."""

    key: str
    type: str
    accepted: str
    default: str
    example: str
    meaning: str


def spec_field_rows() -> list[FieldRow]:
    """Every key a spec file may hold, in the order of :class:`~tilegen.core.spec.AttentionSpec`'s
    fields, then the file's own keys (``mask``, the shorthands) and a ``[params.NAME]`` table's keys."""
    from tilegen.core.mods import ParamDecl
    from tilegen.core.spec import AttentionSpec, spec_from_dict

    meaning = _attributes(AttentionSpec.__doc__)
    param_meaning = _attributes(ParamDecl.__doc__)
    examples = _examples()
    minimal = spec_from_dict(_BASE)
    rows: list[FieldRow] = []

    def default_of(field: dataclasses.Field) -> str:
        if field.name in _BASE:
            return "required"
        value = getattr(minimal, field.name)
        if field.default is dataclasses.MISSING:  # set from its pair when absent
            twin = next(f for f in _BASE if _BASE[f] == value)
            return f"= {twin}"
        if value is None:
            return "absent"
        if field.name == "window":
            return "[-1, -1] (set by mask)"
        if value == () or value == "":
            return "absent"
        return _toml(value)

    for field in dataclasses.fields(AttentionSpec):
        probe = dict(_BASE)
        probe[field.name] = _REFUSED.get(field.name, {})
        _, accepted = _refusal(probe)
        example = examples.get(field.name, "")
        if not example and field.name in _BASE:
            example = f"{field.name} = {_BASE[field.name]}"
        if not example:
            example = f"{field.name} = {_toml(getattr(minimal, field.name))}"
        rows.append(FieldRow(field.name, _type_of(example), accepted, default_of(field), example, meaning.get(field.name, "")))
    _, accepted = _refusal(dict(_BASE, mask=_REFUSED["mask"]))
    rows.append(FieldRow("mask", "string", accepted, '"window" when window is given, else "none"', examples.get("mask", 'mask = "causal"'),
                         "the mask kind: sets window to (-1, -1) (none), (-1, 0) (causal), or takes window = [left, right]"))
    for short, (a, b) in _SHORT_PAIRS.items():
        probe = {k: v for k, v in _BASE.items() if k not in (a, b)}
        probe[short] = {}
        _, accepted = _refusal(probe)
        rows.append(FieldRow(short, "integer", accepted, "absent", examples.get(short, f"{short} = {_BASE[a]}"),
                             f"shorthand: sets both {a} and {b} (then neither may be given)"))
    # a [params.NAME] table: the keys the loader names when it refuses an unknown one
    _, keys = _refusal(dict(_BASE, params={"a": {"shape": ["Hq"], "none_such": 0}}))
    refused = {"shape": 5, "dtype": "none-such", "values": "none-such"}
    for key in re.findall(r"\w+", keys.removeprefix("the keys")):
        entry = {"shape": ["Hq"], key: refused.get(key, {})}
        _, accepted = _refusal(dict(_BASE, params={"a": entry}))
        default = next((f.default for f in dataclasses.fields(ParamDecl) if f.name == key), dataclasses.MISSING)
        shown = "required" if default is dataclasses.MISSING else ("absent" if default is None else _toml(default))
        example = examples.get(f"params.NAME.{key}", "")
        rows.append(FieldRow(f"params.NAME.{key}", _type_of(example), accepted, shown, example, param_meaning.get(key, "")))
    return rows


def _cell(text: str) -> str:
    text = re.sub(r":(?:class|func|mod|meth|attr):`~?([^`]+)`", r"`\1`", str(text))  # Sphinx roles as code
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def spec_fields_markdown() -> str:
    """The spec-field table as Markdown."""
    lines = ["| key | type | accepted | default | example | meaning |", "|---|---|---|---|---|---|"]
    for r in spec_field_rows():
        lines.append("| " + " | ".join(_cell(c) for c in (_code(r.key), r.type, r.accepted, r.default, _code(r.example), r.meaning)) + " |")
    return "\n".join(lines) + "\n"


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    """(flags, value, help) of every argument but --help."""
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        flags = ", ".join(action.option_strings) or action.dest
        if action.choices is not None and not isinstance(action.choices, dict):
            value = ", ".join(str(c) for c in action.choices)
        elif action.nargs == 0:
            value = ""
        else:
            value = action.metavar or action.dest.upper()
        help_text = formatter._expand_help(action) if action.help else ""
        if action.default not in (None, False, argparse.SUPPRESS) and "default" not in help_text:
            help_text += f" (default {action.default})"
        rows.append((flags, value, help_text))
    return rows


def cli_markdown() -> str:
    """The reference of the ``tilegen`` command and each of its subcommands, from the parser."""
    os.environ["COLUMNS"] = "100"  # the usage lines' width
    from tilegen.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    out = ["```text", parser.format_usage().strip(), "```", ""]
    for name, p in sub.choices.items():
        out += [f"## tilegen {name}", "", (helps.get(name) or "").rstrip(".") + ".", "", "```text", p.format_usage().strip(), "```", ""]
        out += ["| argument | value | what |", "|---|---|---|"]
        for flags, value, text in _options(p):
            out.append(f"| `{_cell(flags)}` | {('`' + value + '`') if value else ''} | {_cell(text)} |")
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:  # the MkDocs hook signature
    if SPEC_MARKER in markdown:
        markdown = markdown.replace(SPEC_MARKER, spec_fields_markdown())
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_markdown())
    return markdown


_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):(<code>)~?")


def on_page_content(html: str, page, config, files) -> str:  # the MkDocs hook signature
    """The docstrings' Sphinx roles (``:func:`name```) rendered as plain code: drop the role."""
    return _ROLE.sub(r"\1", html)
