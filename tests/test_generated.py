"""Generated code is reproducible: every folder under generated/ regenerates byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tilegen.backends import backend_for
from tilegen.core.spec import builtin_spec
from tilegen.core.targets import load_target

ROOT = Path(__file__).resolve().parent.parent / "generated"
FOLDERS = sorted(p.parent for p in ROOT.glob("*/*/manifest.json"))


def test_there_is_generated_code():
    assert any(f.name == "ascend910b2" for f in FOLDERS)


@pytest.mark.parametrize("folder", FOLDERS, ids=[f"{f.parent.name}/{f.name}" for f in FOLDERS])
def test_regenerates_byte_for_byte(folder):
    manifest = json.loads((folder / "manifest.json").read_text())
    spec = builtin_spec(manifest["spec"]["name"])
    target = load_target(manifest["target"])
    generated = backend_for(target).generate(spec, target.name, dq_strategy=manifest["dq_strategy"])
    on_disk = {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}
    assert sorted(on_disk) == sorted(generated.files), "file set differs: regenerate (see generated/README.md)"
    for name, text in generated.files.items():
        assert on_disk[name] == text, f"{folder.name}/{name} differs from a fresh generate: regenerate it"
