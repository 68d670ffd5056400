"""Sharded checkpoints: each rank writes its own state (its shares of the tables, their optimizer state,
and the replicated parameters) atomically into a folder of the step, then rank 0 writes a manifest beside
them (world size, placement, the row-laid-out tables and their row-indexed state, a checksum per file),
atomically, and removes older folders: the manifest always names a whole checkpoint.

Any number of ranks resumes it: with the same world size each rank reads its own file; with another,
each rank reads every file once, in turn, and keeps the rows it now owns (global row g of a table lives on
rank g % N at local row g // N, for the old and the new N alike; one process holds every row) and the
tables placed whole on it (each rank's file lists the entries of the whole tables it held), so a job can
go from 2 ranks to 1, 1 to 2, or 2 to 3. The tools that read a checkpoint (eval, export, infer) load it as
one process."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import paddle

from ...checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ...data.vocabulary import file_digest, write_json_atomically
from ...nn.shards import RowShare, held_rows

FORMAT = "paddle_edo sharded checkpoint 1"
PLACEMENT = "rows by id modulo world size"


def sharded_tables(model: paddle.nn.Layer) -> dict[str, int]:
    """The model's tables laid out by rows, its shares (in one process, shares of every row): sublayer name
    -> rows (ids). Tables whole on every rank are not among them: any number of ranks holds them whole."""
    return {name: layer.row_share.rows for name, layer in model.named_sublayers()
            if getattr(layer, "row_share", None) is not None}


def table_owners(model: paddle.nn.Layer) -> dict[str, int]:
    """The model's tables placed whole on one rank: sublayer name -> the rank holding it."""
    return {name: layer.table_share.owner for name, layer in model.named_sublayers()
            if getattr(layer, "table_share", None) is not None}


def whole_table_keys(state: dict[str, Any], model: paddle.nn.Layer) -> dict[str, dict[str, list[str]]]:
    """Per table this rank holds whole, per section of ``state``, every entry of it: its own tensors,
    Paddle's state of its parameters (moments and beta powers), its row trainer's state."""
    keys: dict[str, dict[str, list[str]]] = {}
    for table, layer in model.named_sublayers():
        share = getattr(layer, "table_share", None)
        if share is None or not share.held:
            continue
        params = [p.name for p in layer.parameters()]
        keys[table] = {
            "model": [k for k in state["model"] if k.startswith(f"{table}.")],
            "optimizer": [k for k in state["optimizer"] if any(k.startswith(f"{p}_") for p in params)],
            "table_rows": [k for k in state.get("table_rows", {}) if k.startswith(f"{table}.")],
        }
    return keys


def row_keys(state: dict[str, Any], model: paddle.nn.Layer, tables: dict[str, int], rank: int,
             world_size: int) -> dict[str, dict[str, list[str]]]:
    """Per table, per section of ``state`` (model, optimizer, table_rows), the entries indexed by its rows:
    the table's own tensors, Paddle's moments of its parameters and its row trainer's state1 / state2, whose
    first axis is the rows this rank holds (the same names on every rank). A table's own tensor of another
    meaning whose first axis happens to equal that count would be taken for rows: the layers here keep
    none but scalars."""
    layers = dict(model.named_sublayers())
    keys: dict[str, dict[str, list[str]]] = {}
    for table, rows in tables.items():
        held = held_rows(rows, rank, world_size)
        params = [p.name for p in layers[table].parameters()]

        def rowwise(value: Any) -> bool:
            shape = _shape(value)
            return bool(shape) and shape[0] == held
        keys[table] = {
            "model": [k for k, v in state["model"].items() if k.startswith(f"{table}.") and rowwise(v)],
            "optimizer": [k for k, v in state["optimizer"].items()   # moments, not Adam's beta powers
                          if any(k.startswith(f"{p}_") for p in params) and "_pow_acc" not in k and rowwise(v)],
            "table_rows": [k for k, v in state.get("table_rows", {}).items()   # TableStates' state1 / state2
                           if k in (f"{table}.state1", f"{table}.state2") and rowwise(v)],
        }
    return keys


def save_sharded(state: dict[str, Any], manifest: Path, rank: int, world_size: int, model: paddle.nn.Layer,
                 min_rows: int, barrier: Callable[[], None], placement: str = "auto") -> Path:
    """Write this rank's ``state`` and (rank 0) the manifest; every rank calls it, between barriers.
    ``min_rows`` and ``placement``: the job's distributed.shard_min_rows and distributed.placement."""
    manifest = Path(manifest)
    state = {**state, "whole_tables": whole_table_keys(state, model)}
    folder_name = f"{manifest.name.split('.')[0]}.step{state['global_step']}"
    folder = manifest.parent / folder_name
    own = save_checkpoint(state, folder / f"rank{rank}.pdckpt")
    # each rank hashes its own file (in its page cache), so no rank reads the others'
    own.with_name(own.name + ".sha256").write_text(file_digest(own), encoding="utf-8")
    barrier()
    if rank == 0:
        tables = sharded_tables(model)
        files = [f"{folder_name}/rank{r}.pdckpt" for r in range(world_size)]
        body = {"format": FORMAT, "world_size": world_size, "placement": PLACEMENT, "min_rows": min_rows,
                "table_placement": placement, "table_owners": table_owners(model),
                "global_step": state["global_step"], "tables": tables,
                "row_keys": row_keys(state, model, tables, rank, world_size), "files": files,
                "sha256": [(manifest.parent / f"{f}.sha256").read_text(encoding="utf-8") for f in files]}
        write_json_atomically(manifest, body)
        for old in manifest.parent.glob(f"{manifest.name.split('.')[0]}.step*"):
            if old.name != folder_name and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
    barrier()
    return manifest


def is_sharded_checkpoint(path: str | Path) -> bool:
    return str(path).endswith(".json")


def read_manifest(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint manifest {path} cannot be read ({exc})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a paddle_edo sharded checkpoint manifest (format {FORMAT!r})")
    if body.get("placement") != PLACEMENT:
        raise CheckpointError(f"checkpoint {path} places rows {body.get('placement')!r}; this version reads "
                              f"{PLACEMENT!r}")
    return body


def load_sharded(path: str | Path, rank: int, world_size: int, min_rows: int,
                 fresh_optimizer: dict[str, Any] | None = None, placement: str = "auto",
                 owners: dict[str, int] | None = None) -> dict[str, Any]:
    """This rank's state from a sharded checkpoint written by any number of ranks: a checkpoint as
    ``Engine.state()`` makes it, the row-indexed entries holding the rows rank ``rank`` of ``world_size``
    owns (all rows for one process), with the tables this run places whole on it. ``fresh_optimizer``:
    this run's optimizer state as built, whose entries replace those of another shape from another world
    size (a cached table's slots, whose rows went to its host store with their state when the checkpoint
    was written). ``placement`` and ``owners``: this run's distributed.placement and its whole tables'
    owners (``table_owners``; empty: this process holds every table)."""
    path = Path(path)
    body = read_manifest(path)
    if body["min_rows"] != min_rows:
        raise CheckpointError(f"checkpoint {path} shared tables of at least distributed.shard_min_rows = "
                              f"{body['min_rows']} rows, this run {min_rows}; resume it with the same "
                              f"distributed.shard_min_rows")
    owners = owners or {}
    saved_placement = body.get("table_placement")  # None: written before whole tables, every table by rows
    if saved_placement is None and owners:
        raise CheckpointError(f"checkpoint {path} was written before tables could be placed whole on one rank, "
                              f"this run places {sorted(owners)[0]!r} so; resume it with distributed.placement = "
                              f"'row'")
    if saved_placement is not None and saved_placement != placement:
        raise CheckpointError(f"checkpoint {path} placed its tables by distributed.placement = {saved_placement!r}, "
                              f"this run by {placement!r}; resume it with the same distributed.placement")
    old_world = int(body["world_size"])
    if old_world == world_size and owners and owners != body.get("table_owners", {}):
        raise CheckpointError(f"checkpoint {path} placed whole tables on ranks {body.get('table_owners')}, this "
                              f"run on {owners}; resume it with the same model, embedding and distributed sections")

    def read(source: int) -> dict[str, Any]:
        file = path.parent / body["files"][source]
        if not file.is_file():
            raise CheckpointError(f"checkpoint {path}: rank {source}'s file {file} is missing")
        if file_digest(file) != body["sha256"][source]:
            raise CheckpointError(f"checkpoint {path}: rank {source}'s file {file} does not match its checksum")
        return load_checkpoint(file)

    if old_world == world_size:
        return read(rank)
    home = rank if rank < old_world else 0  # the file whose entries not laid out by rows this rank takes
    state = read(home)
    remote = {table for table, owner in owners.items() if owner != rank}
    for table, sections in state.get("whole_tables", {}).items():   # whole tables now held elsewhere
        if table in remote:
            for section, keys in sections.items():
                for key in keys:
                    del state[section][key]
    targets = {table: RowShare(rank, world_size, rows).global_rows() for table, rows in body["tables"].items()}
    assembled: dict[tuple[str, str], np.ndarray] = {}
    for source in range(old_world):
        old = state if source == home else read(source)
        for table, sections in old.get("whole_tables", {}).items():   # whole tables now held here
            if table not in remote and source != home:
                for section, keys in sections.items():
                    for key in keys:
                        state[section][key] = old[section][key]
        for table, sections in body["row_keys"].items():
            rows = targets[table]
            mine = rows % old_world == source
            for section, keys in sections.items():
                for key in keys:
                    value = _array(old[section][key])
                    if (section, key) not in assembled:
                        assembled[section, key] = np.zeros([rows.size, *value.shape[1:]], dtype=value.dtype)
                    assembled[section, key][mine] = value[rows[mine] // old_world]
        del old
    for (section, key), value in assembled.items():
        state[section][key] = value
    for key, value in (fresh_optimizer or {}).items():
        if key in state["optimizer"] and _shape(state["optimizer"][key]) != _shape(value):
            state["optimizer"][key] = value
    return state


def _shape(value: Any) -> list[int]:
    """A saved entry's shape, read without copying it (a Paddle tensor, an array or a number)."""
    return list(value.shape) if hasattr(value, "shape") else list(np.shape(value))


def _array(value: Any) -> np.ndarray:
    return value.numpy() if isinstance(value, paddle.Tensor) else np.asarray(value)
