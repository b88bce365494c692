"""Named hooks of the templates, after FlexAttention's (torch/_inductor/kernel/flex/*.jinja, where a
template calls ``{{ modification(...) }}`` and Python decides the code that lands there).

A template calls ``{{ hook("point") }}`` wherever a feature of a spec may add text: an argument, a
docstring line, a host step, an entry point. The backend's Python side decides which features a spec
has, in order (its lowering; e.g. ``ascendc.host_features``); each feature is a template of macros,
``templates/<backend>/features/<feature>.jinja``, one macro per hook point it fills. ``hook(point)``
renders the macro ``point`` of every feature that has one, in the feature order, and joins them. A
template thus never tests a feature (no ``{% if mods %}``): what it renders at a point is what the
features the backend chose put there.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import jinja2


def hooks(env: jinja2.Environment, features: Iterable[str], context: Mapping, points: Iterable[str]) -> Callable[..., str]:
    """The ``hook`` function of a render: ``hook(point, *args, sep="")`` is the text of macro ``point`` of
    each of ``features`` (``features/<name>.jinja`` in ``env``, with ``context`` and ``hook`` as its
    globals, so that a macro may call ``hook`` too), called with ``args``, joined by ``sep``.

    Raises:
        ValueError: a feature defines a macro that is not one of ``points`` (a misspelt hook would never
            render), or a template asks for a point that is not one of ``points``.
    """
    points = set(points)
    modules: list = []

    def hook(point: str, *args, sep: str = "") -> str:
        if point not in points:
            raise ValueError(f"hook {point!r} is not a hook point; accepted: {', '.join(sorted(points))}")
        return sep.join(str(getattr(m, point)(*args)) for m in modules if hasattr(m, point))

    scope = {**context, "hook": hook}
    for name in features:
        module = env.get_template(f"features/{name}.jinja").make_module(scope)
        unknown = sorted(n for n in vars(module) if not n.startswith("_") and n not in points)
        if unknown:
            raise ValueError(f"features/{name}.jinja: macro(s) {', '.join(unknown)} are not hook points; accepted: {', '.join(sorted(points))}")
        modules.append(module)
    return hook
