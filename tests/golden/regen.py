"""Rewrite the golden IR texts of tests/test_passes.py and tests/test_annotations.py (run after an intended change, then
review the diff)."""

import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here.parent))

from helpers import make_spec  # noqa: E402
from tilegen.core.printer import format_program  # noqa: E402
from tilegen.backends import compile_backward, compile_forward  # noqa: E402
from tilegen.core.spec import builtin_spec  # noqa: E402

(here / "bwd-atomic.txt").write_text(
    format_program(compile_backward(make_spec(seq_q=70, seq_k=70, window=(-1, 0)), dq_strategy="atomic"))
)
(here / "bwd-separate.txt").write_text(
    format_program(
        compile_backward(make_spec(seq_q=70, seq_k=70, heads_q=4, heads_kv=2, window=(8, 0)), dq_strategy="separate")
    )
)
(here / "fwd-ascend-tiny.txt").write_text(format_program(compile_forward(builtin_spec("tiny"), target="ascend910b2")))

# The Before/Expected golden of every pass (tests/golden/passes/, tests/test_pass_goldens.py).
from pass_goldens import regenerate  # noqa: E402

left = regenerate()
if left:
    raise SystemExit(f"no case of tests/pass_goldens.py CASES changes the passes {left}: add one")
