"""The named hooks of the templates (tilegen/backends/hooks.py): a template renders at a hook point the
macros of the features the backend chose, in their order; a misspelt point or macro is one error."""

from __future__ import annotations

import jinja2
import pytest

from tilegen.backends.hooks import hooks

FEATURES = {
    "features/a.jinja": "{% macro args() %}a, {% endmacro %}{% macro doc() %}A {{ x }}\n{% endmacro %}",
    "features/b.jinja": "{% macro args() %}b, {% endmacro %}{% macro body(n) %}{{ hook('args') }}{{ n }}{% endmacro %}",
    "features/typo.jinja": "{% macro arsg() %}t{% endmacro %}",
}


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.DictLoader(FEATURES), undefined=jinja2.StrictUndefined)


def test_a_point_renders_the_chosen_features_in_their_order():
    env = _env()
    assert hooks(env, ["a", "b"], {"x": 1}, ("args", "doc", "body"))("args") == "a, b, "
    assert hooks(env, ["b", "a"], {"x": 1}, ("args", "doc", "body"))("args") == "b, a, "
    assert hooks(env, ["b"], {}, ("args", "doc", "body"))("doc") == ""  # no feature fills it
    assert hooks(env, ["a", "b"], {"x": 2}, ("args", "doc", "body"))("doc") == "A 2\n"  # the render's context
    assert hooks(env, ["a", "b"], {"x": 2}, ("args", "doc", "body"))("body", 7) == "a, b, 7"  # a hook inside a hook


def test_a_misspelt_point_or_macro_is_one_error():
    with pytest.raises(ValueError, match=r"features/typo.jinja: macro\(s\) arsg are not hook points; accepted: args"):
        hooks(_env(), ["typo"], {}, ("args",))
    with pytest.raises(ValueError, match=r"hook 'arsg' is not a hook point; accepted: args, doc"):
        hooks(_env(), ["a"], {"x": 1}, ("args", "doc"))("arsg")
