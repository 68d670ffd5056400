"""Replace sublayers of a model in place: the one place that writes Paddle's sublayer table."""
from __future__ import annotations

from fnmatch import fnmatch
from typing import Callable, Iterable

import paddle

from ..errors import EdoValueError


def swap_sublayers(model: paddle.nn.Layer, replace: Callable[[str, paddle.nn.Layer], paddle.nn.Layer | None],
                   include: Iterable[str] | None = None, exclude: Iterable[str] | None = None) -> list[str]:
    """Call ``replace(name, layer)`` for every sublayer under ``model`` (listed before any is swapped;
    ``include`` / ``exclude``: glob patterns over the names); a layer it returns takes that place, None
    keeps the sublayer. Returns the names replaced."""
    include, exclude = list(include) if include is not None else None, list(exclude or ())
    replaced = []
    children = [(parent, key, f"{parent_name}.{key}" if parent_name else key, child)
                for parent_name, parent in model.named_sublayers(include_self=True)
                for key, child in parent._sub_layers.items()]
    for parent, key, name, child in children:
        if include is not None and not any(fnmatch(name, p) for p in include):
            continue
        if any(fnmatch(name, p) for p in exclude):
            continue
        new = replace(name, child)
        if new is not None and new is not child:
            parent._sub_layers[key] = new
            replaced.append(name)
    return replaced


def swap_named(model: paddle.nn.Layer, layers: dict[str, paddle.nn.Layer]) -> dict[str, paddle.nn.Layer]:
    """Put each of ``layers`` in the place its name (as ``named_sublayers`` gives it) names under ``model``,
    following that name's path alone (``swap_sublayers`` walks the whole model); returns the layers that
    were there, which ``swap_named`` puts back."""
    places = []
    for name in layers:
        *path, key = name.split(".")
        parent = model
        for part in path:
            parent = parent._sub_layers.get(part) if parent is not None else None
        if parent is None or key not in parent._sub_layers:
            raise EdoValueError(f"swap_named: {model.full_name()} has no sublayer {name!r}")
        places.append((name, parent, key))
    originals = {}
    for name, parent, key in places:
        originals[name] = parent._sub_layers[key]
        parent._sub_layers[key] = layers[name]
    return originals
