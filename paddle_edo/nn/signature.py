"""The tables' call signatures as they were before the common shape, accepted for one release.

Every table is called as ``(num_embeddings, embedding_dim, <its own essentials>, *, padding_idx=None,
sparse=True, weight_attr=None, name=None, ...)``. A call in an older shape (more positional arguments,
or an old keyword) is mapped onto the new one and warned about with ``EdoDeprecationWarning``.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable, Mapping, Sequence

from ..errors import EdoDeprecationWarning, EdoTypeError

RENAMED = {"check_ids": "range_check"}  # old keyword -> new, in every layer


def accepts_old_signature(old_order: Sequence[str], renamed: Mapping[str, str] | None = None,
                          is_old: Callable[[tuple, dict], bool] | None = None,
                          adapt: Callable[[dict], dict] | None = None) -> Callable:
    """Decorate a layer's ``__init__``: a call whose positional arguments follow ``old_order`` (by
    default: more of them than the new signature takes; ``is_old`` decides otherwise), or that uses an
    old keyword of ``renamed``, is translated (``adapt`` fixes meanings that moved) and warned about."""
    renamed = {**RENAMED, **(renamed or {})}

    def decorate(init: Callable) -> Callable:
        positional = len(_names(init))

        @functools.wraps(init)
        def wrapper(self, *args: Any, **kwargs: Any) -> None:
            label = type(self).__name__
            old_call = is_old(args, kwargs) if is_old else len(args) > positional
            old_keywords = [k for k in kwargs if k in renamed]
            if not old_call and not old_keywords:
                return init(self, *args, **kwargs)
            if old_call:
                if len(args) > len(old_order):
                    raise EdoTypeError(f"{label}() takes at most {len(old_order)} positional arguments in its old "
                                       f"form, got {len(args)}")
                named = dict(zip(old_order, args))
                for key, value in kwargs.items():
                    if key in named:
                        raise EdoTypeError(f"{label}() got {key!r} both by position and by keyword")
                    named[key] = value
            else:
                named = {**dict(zip(_names(init)[:len(args)], args)), **kwargs}
            for old, new in renamed.items():
                if old in named:
                    if new in named:
                        raise EdoTypeError(f"{label}() got both {old!r} (its old name) and {new!r}")
                    named[new] = named.pop(old)
            if adapt is not None:
                named = adapt(named)
            warnings.warn(f"{label}: this call uses the old signature, which goes in the next release; call "
                          f"{label}{_shape(init)}", EdoDeprecationWarning, stacklevel=2)
            return init(self, **named)

        return wrapper

    return decorate


def _names(init: Callable) -> list[str]:
    """The names of ``init``'s positional parameters, without self."""
    return init.__code__.co_varnames[1:init.__code__.co_argcount]


def _shape(init: Callable) -> str:
    """'(num_embeddings, embedding_dim, storage_format, mode, *, padding_idx, ...)' for the warning."""
    parameters = list(inspect.signature(init).parameters.values())[1:]
    parts, starred = [], False
    for p in parameters:
        if p.kind is p.KEYWORD_ONLY and not starred:
            parts.append("*")
            starred = True
        parts.append(p.name)
        if len(parts) >= 8:
            parts.append("...")
            break
    return "(" + ", ".join(parts) + ")"
