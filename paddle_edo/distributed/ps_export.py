"""What trainer 0 takes from the servers at the end of a PS job, so that the dygraph tools (eval,
export, infer) serve the model: the dense parameters and every row of every table."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import paddle

from ..data.ctr import FieldSpec
from ..nn import PSEmbedding

EXPORT_CHUNK = 8192


def dense_state(exe: paddle.static.Executor, model: paddle.nn.Layer) -> dict[str, np.ndarray]:
    """Dense parameters from the scope (pulled from the servers) and the layers' constants (hash
    coefficients), computed by the program."""
    scope = paddle.static.global_scope()
    state = {key: np.array(scope.find_var(var.name).get_tensor()) for key, var in model.state_dict().items()}
    main = paddle.static.default_main_program()
    for layer_name, layer in model.named_sublayers():
        for name, var in layer.__dict__.get("static_constants", {}).items():
            state[f"{layer_name}.{name}"] = exe.run(main._prune(targets=[var]), feed={}, fetch_list=[var])[0]
    return state


def pulled_tables(exe: paddle.static.Executor, model: paddle.nn.Layer, fields: Sequence[FieldSpec],
                  served: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """Every row of every table, looked up through the servers by feeding row ids straight to each
    table's lookup (ids no trainer ever looked up come back as zeros, as the servers serve them; ids no
    trainer admitted, ``served`` False, get row 0, as the evaluation serves them)."""
    out = {}
    main = paddle.static.default_main_program()
    names = [f.name for f in fields]
    tables = {name: layer for name, layer in model.named_sublayers() if isinstance(layer, PSEmbedding)}
    for name, table in tables.items():
        # the servers' lookups are fused into one op that reads every table's ids: the fields get
        # padding, this table its row ids
        program = main._prune_with_input([*names, table.ids.name], [table.output])
        rows = []
        for begin in range(0, table.num_embeddings, EXPORT_CHUNK):
            ids = np.arange(begin, min(begin + EXPORT_CHUNK, table.num_embeddings), dtype=np.int64)
            feed = {f.name: np.zeros((1, f.max_len) if f.multi_valued else (1,), np.int64) for f in fields}
            feed[table.ids.name] = ids[:, None]
            rows.append(exe.run(program, feed=feed, fetch_list=[table.output])[0])
        weight = np.concatenate(rows).astype(np.float32)
        if table.padding_idx is not None:
            weight[table.padding_idx] = 0.0
        field = model.table_fields().get(name)
        if served is not None and field in served:  # served as id 0, like the evaluation
            weight[~served[field]] = weight[0]
        out[f"{name}.weight"] = weight
    return out
