"""Before/Expected tests of every pass (TVM style): for each pass of the front, interpreter, Ascend and
GPU lists (enumerated from the lists, so that a new pass without a golden fails here), its golden
tests/golden/passes/<pass>.txt holds a small program and the program the pass should make of it. The
test parses the Before text, runs that one pass on it (as the driver does: a search pass judges its
candidates by the passes after it; the verifier after it) and compares the printed result with the
Expected text, which shows the pass acting (it differs from Before). The goldens are written by
``python tests/golden/regen.py`` and reviewed as a diff (tests/golden/README.md).
"""

from __future__ import annotations

import pytest

from pass_goldens import GOLDEN_PASSES, all_pass_names, parse_before, read_golden, run_one, slug
from tilegen.core.printer import format_program

NAMES = all_pass_names()


def test_every_pass_of_the_lists_has_a_golden():
    files = {p.stem for p in GOLDEN_PASSES.glob("*.txt")}
    missing = [n for n in NAMES if slug(n) not in files]
    assert not missing, f"passes without a golden under {GOLDEN_PASSES}: {missing} (add a case to tests/pass_goldens.py CASES and run tests/golden/regen.py)"
    stale = files - {slug(n) for n in NAMES}
    assert not stale, f"goldens of no pass of the lists: {sorted(stale)}"


@pytest.mark.parametrize("name", NAMES)
def test_pass_makes_its_expected_program(name):
    path = GOLDEN_PASSES / f"{slug(name)}.txt"
    if not path.exists():
        pytest.fail(f"no golden {path}")
    recorded, case, before, expected = read_golden(path)
    assert recorded == name
    assert before != expected, f"{path.name}: the pass does not act on its Before program"
    program = run_one(case, name, parse_before(before))
    assert format_program(program) == expected, f"{path.name}: the pass's output differs from Expected (python tests/golden/regen.py, then review the diff)"
