"""Memory budgets as configs and command lines write them: bytes, or a number with a unit."""
from __future__ import annotations

import re
from typing import Any

from .schema import ConfigError

UNITS = {"B": 1, "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "TB": 10 ** 12,
         "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}
_AMOUNT = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*")


def parse_bytes(value: Any, path: str) -> int:
    """A positive number of bytes from an int (bytes) or a text such as '2GiB', '512 MB', '1.5e9'; a
    ConfigError naming ``path``, the value and the units allowed otherwise."""
    allowed = f"a positive number of bytes, or a number with a unit ({', '.join(UNITS)})"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{path} = {value!r} is not a memory size; expected {allowed}")
    amount = value
    if isinstance(value, str):
        match = _AMOUNT.fullmatch(value)
        unit = match.group(2) if match else None
        if match is None or (unit and unit not in UNITS):
            raise ConfigError(f"{path} = {value!r} is not a memory size; expected {allowed}")
        amount = float(match.group(1)) * UNITS[unit or "B"]
    if not amount >= 1:
        raise ConfigError(f"{path} = {value!r} must be at least one byte; expected {allowed}")
    return int(amount)


def device_budget(device_memory: Any, reserve: Any, names: tuple[str, str] = ("device_memory", "reserve")) -> int:
    """Bytes the tables may take on a device of ``device_memory`` that keeps ``reserve`` (a fraction in
    [0, 1), or a memory size) for everything else: activations, optimizer state, the framework.
    ``names``: what errors call the two values."""
    total = parse_bytes(device_memory, names[0])
    if isinstance(reserve, (int, float)) and not isinstance(reserve, bool) and 0 <= reserve < 1:
        kept = int(total * reserve)
    else:
        kept = parse_bytes(reserve, names[1])
    if kept >= total:
        raise ConfigError(f"{names[1]} = {reserve!r} keeps {kept} of the device's {total} bytes; it must be less "
                          f"than {names[0]} = {device_memory!r} (a fraction in [0, 1) or a smaller size)")
    return total - kept
