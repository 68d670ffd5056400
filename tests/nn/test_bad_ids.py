"""Bad ids tried on every registered layer, each layer in its own process (a crash fails its case and
nothing else): every out-of-range or wrongly typed id is refused with an error naming the layer, before
any out-of-bounds read; nothing crashes or hangs."""
import json
import os
import subprocess
import sys

import pytest
from layer_zoo import LAYERS, ROWS

from conftest import ROOT

# name -> (ids as Python builds them, what each layer does: "ok" or the error's type)
KINDS = {
    "negative": ("paddle.to_tensor([[1, -1]])", "IndexError"),
    "one past the end": (f"paddle.to_tensor([[1, {ROWS}]])", "IndexError"),
    "int64 max": ("paddle.to_tensor([2**63 - 1])", "IndexError"),
    "int64 min": ("paddle.to_tensor([-2**63])", "IndexError"),
    "int32 past the end": (f"paddle.to_tensor([{ROWS} + 5], dtype='int32')", "IndexError"),
    "last of a large batch": (f"paddle.to_tensor(np.r_[np.zeros(100000, np.int64), {ROWS}])", "IndexError"),
    "float32": ("paddle.to_tensor([1.0])", "TypeError"),
    "float64": ("paddle.to_tensor([1.0], dtype='float64')", "TypeError"),
    "bool": ("paddle.to_tensor([True])", "TypeError"),
    "uint8": ("paddle.to_tensor(np.array([1], np.uint8))", "TypeError"),
    "int16": ("paddle.to_tensor(np.array([1], np.int16))", "TypeError"),
    "valid, 3-D": (f"paddle.to_tensor(np.arange(24).reshape(2, 3, 4) % {ROWS})", "ok"),
}
ANY_ID = {"hash"}  # hashing takes any int64: no range to leave

PROBE = """
import json, sys
import numpy as np
import paddle
sys.path.insert(0, {tests!r})
from layer_zoo import LAYERS
from paddle_edo.errors import EdoError
from paddle_edo.nn import bind_optimizer
layer = LAYERS[{kind!r}]()
if {kind!r} == "cached":
    bind_optimizer(layer, paddle.optimizer.Adam(0.01, parameters=layer.parameters(), lazy_mode=True))
if {kind!r} == "quantized_low_precision":
    layer.configure_row_optimizer("sgd")
results = {{}}
for name, expression in {cases!r}.items():
    for training in (False, True):
        layer.train() if training else layer.eval()
        try:
            with paddle.set_grad_enabled(training):
                layer(eval(expression))
            results[f"{{name}}, training={{training}}"] = ["ok", ""]
        except EdoError as exc:
            results[f"{{name}}, training={{training}}"] = [[c.__name__ for c in type(exc).__mro__], str(exc)]
print("RESULTS" + json.dumps(results))
"""


@pytest.mark.parametrize("kind", list(LAYERS))
def test_bad_ids_are_refused_naming_the_layer(kind):
    cases = {name: expression for name, (expression, _) in KINDS.items()}
    code = PROBE.format(tests=str(ROOT / "tests" / "nn"), kind=kind, cases=cases)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULTS"))
    results = json.loads(line[len("RESULTS"):])
    for name, (_, expected) in KINDS.items():
        if kind in ANY_ID and expected == "IndexError":
            expected = "ok"
        for training in (False, True):
            kinds, message = results[f"{name}, training={training}"]
            where = f"{kind}, {name}, training={training}: {message}"
            if expected == "ok":
                assert kinds == "ok", where
            else:
                assert expected in kinds, where
                assert "embedding" in message.split(":")[0].lower(), where  # names the layer
