"""Spec loading and validation: every bad field gets an error naming it, the value and what is accepted."""

from __future__ import annotations

import math

import pytest

from tilegen.core.errors import SpecError
from tilegen.core.spec import AttentionSpec, builtin_spec, builtin_specs, load_spec, spec_from_dict


def test_builtins_exist_and_load():
    names = set(builtin_specs())
    assert {"llama2-7b", "llama3-8b", "tiny", "demo"} <= names
    llama2 = builtin_spec("llama2-7b")
    assert (llama2.heads_q, llama2.head_dim_qk, llama2.seq_q, llama2.dtype, llama2.mask_kind) == (32, 128, 4096, "fp16", "causal")
    llama3 = builtin_spec("llama3-8b")
    assert (llama3.heads_q, llama3.heads_kv, llama3.seq_k, llama3.dtype) == (32, 8, 8192, "bf16")
    assert llama3.group == 4


def test_toml_and_yaml_round_trip(tmp_path):
    spec = AttentionSpec(2, 8, 2, 100, 300, 64, 48, "bf16", 0.5, (16, 4), "top_left", "BSND", "x")
    toml = tmp_path / "x.toml"
    toml.write_text(spec.to_toml())
    assert load_spec(toml) == spec
    yaml_file = tmp_path / "y.yaml"
    yaml_file.write_text(
        "batch: 2\nheads_q: 8\nheads_kv: 2\nseq_q: 100\nseq_k: 300\nhead_dim_qk: 64\nhead_dim_v: 48\n"
        "dtype: bf16\nscale: 0.5\nmask: window\nwindow: [16, 4]\nalignment: top_left\nlayout: BSND\nname: x\n"
    )
    assert load_spec(yaml_file) == spec


def test_defaults_and_shorthands():
    spec = spec_from_dict({"batch": 1, "heads": 4, "seq": 10, "head_dim": 16})
    assert (spec.heads_q, spec.heads_kv, spec.seq_q, spec.seq_k, spec.head_dim_v) == (4, 4, 10, 10, 16)
    assert spec.softmax_scale == pytest.approx(1 / math.sqrt(16))
    assert spec.window == (-1, -1) and spec.alignment == "bottom_right" and spec.layout == "BNSD"
    assert spec_from_dict({"batch": 1, "heads": 1, "seq": 4, "head_dim": 8, "mask": "causal"}).window == (-1, 0)


GOOD = {"batch": 1, "heads_q": 4, "heads_kv": 2, "seq_q": 16, "seq_k": 16, "head_dim_qk": 32}


@pytest.mark.parametrize(
    "change,field",
    [
        ({"batch": 0}, "batch"),
        ({"batch": -3}, "batch"),
        ({"seq_q": 2.5}, "seq_q"),
        ({"heads_q": True}, "heads_q"),
        ({"heads_kv": 3}, "heads_kv"),
        ({"head_dim_qk": 0}, "head_dim_qk"),
        ({"head_dim_qk": 4096}, "head_dim_qk"),
        ({"dtype": "fp8"}, "dtype"),
        ({"layout": "SBH"}, "layout"),
        ({"alignment": "center"}, "alignment"),
        ({"scale": -1.0}, "scale"),
        ({"scale": "big"}, "scale"),
        ({"mask": "diagonal"}, "mask"),
        ({"mask": "window", "window": [3]}, "window"),
        ({"mask": "window", "window": [-2, 0]}, "window"),
        ({"mask": "causal", "window": [1, 1]}, "window"),
        ({"colour": "red"}, "colour"),
        ({"seq": 8}, "seq_q"),
    ],
)
def test_bad_fields_are_named(change, field):
    with pytest.raises(SpecError) as info:
        spec_from_dict({**GOOD, **change}, where="x.toml")
    assert info.value.field == field
    text = str(info.value)
    assert field in text and "accepted" in text and "x.toml" in text


def test_missing_field():
    data = dict(GOOD)
    del data["seq_k"]
    with pytest.raises(SpecError, match="seq_k"):
        spec_from_dict(data)


def test_no_window_can_empty_every_row():
    """With left, right >= -1 the diagonal point is always visible: (Sq-1, Sk-1) bottom-right and (0, 0)
    top-left. So validation's "every row empty" guard can never fire for a spec; rows can be empty one
    by one (bottom-right causal with Sq > Sk), which is legal."""
    from tilegen.core.spec import visible_row_range

    for sq in (1, 2, 7):
        for sk in (1, 3, 9):
            for left in (-1, 0, 2):
                for right in (-1, 0, 2):
                    for offset in (sk - sq, 0):
                        first, stop = visible_row_range(sq, sk, (left, right), offset)
                        assert first < stop
    assert visible_row_range(5, 2, (-1, 0), 2 - 5) == (3, 5)


def test_bad_files(tmp_path):
    with pytest.raises(SpecError, match="readable"):
        load_spec(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("batch = [")
    with pytest.raises(SpecError, match="valid TOML"):
        load_spec(bad)
    other = tmp_path / "spec.json"
    other.write_text("{}")
    with pytest.raises(SpecError, match=r"\.toml, \.yaml"):
        load_spec(other)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(SpecError, match="table of fields"):
        load_spec(listy)
