"""MkDocs hooks: the reference pages generated from the code, so that they cannot drift from it.

- ``<!-- tilegen:spec-fields -->`` in a page becomes the table of every spec-file field
  (:func:`tilegen.core.spec.field_reference`: its type, what the checks accept in the words of their
  errors, its default, an example and its meaning), the reference ``tilegen spec --fields`` prints.
- ``<!-- tilegen:cli -->`` becomes the reference of every ``tilegen`` command, read from the argument
  parser (:func:`tilegen.cli.build_parser`): usage, help and one row per option.
- The docstrings' Sphinx roles (``:func:`x```) are shown as the plain code they wrap.

The hook imports tilegen from this checkout (the folder above ``tools/``), not from another install.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SPEC_MARKER = "<!-- tilegen:spec-fields -->"
CLI_MARKER = "<!-- tilegen:cli -->"


def _cell(text: str) -> str:
    """``text`` safe inside one cell of a Markdown table."""
    return text.replace("|", "\\|").replace("\n", " ")


def spec_fields_markdown() -> str:
    """The spec-field table: :func:`tilegen.core.spec.format_field_reference` as Markdown (the same
    reference ``tilegen spec --fields`` prints, built from the checks' own tables)."""
    from tilegen.core.spec import format_field_reference

    return format_field_reference(markdown=True)


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
