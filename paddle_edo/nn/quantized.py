"""QuantizedEmbedding: tables stored at fp16, bf16, int8/int4/int2 row-wise, ternary or binary."""
from __future__ import annotations

from typing import Any

import numpy as np
import paddle
import paddle.nn.functional as F

from ..compat import dynamic_graph_under_sot, sparse_gradient
from ..errors import EdoRuntimeError, EdoValueError
from ..kernels import fused_ops, ids_checked_by_kernel, kernels_serve
from ..kernels.calibration import LookupClass, lookup_class, serve
from ..keyed_random import keyed_normal, rounding_noise, rounding_seed
from ..optim.states import TableStates
from ..quant import codecs
from ..quant.row_records import encode_nearest
from ..quant.formats import FORMAT_NUMBERS, FORMATS, QuantFormat, get_format
from ..runtime import release_freed_memory
from ..schema import ConfigError, Option
from .base import EmbeddingBase, int64_ids, known_empty, table_settings
from .dedup import deduplicating, distinct_rows, summed_by_id, unique_ids
from .registry import register_embedding
from .shards import place_of, share_being_built
from .signature import accepts_old_signature

MODES = ("ptq", "qat", "low_precision")
LOW_PRECISION_DTYPES = ("fp16", "bf16", "int8")
ROW_OPTIMIZERS = ("sgd", "adagrad")
ENCODE_CHUNK_ROWS = 1 << 16
RELEASE_FROM_BYTES = 1 << 20  # a smaller master leaves no more behind; handing memory back takes ~2 ms a call
ADAGRAD_EPSILON = 1e-8
FUSED_FAKE_QUANTIZATION = ("fp16", "bf16", "int8", "int4", "int2")  # kernels/fake_quant.cc; the others scale by a mean
ROW_RANGES = ("auto", "search", "min_max")
OUTPUT_DTYPES = ("float32", "float16", "bfloat16")
FUSED_LOOKUPS = {"float32": "edo_quantized_lookup", "float16": "edo_quantized_lookup_fp16",
                 "bfloat16": "edo_quantized_lookup_bf16"}  # kernels/quantized.cc's operator for each output dtype
# row_range 'auto' searches where it lowers the error enough to matter: int4 and int2 (measured on word2vec
# vectors: top-10 neighbour overlap +0.009 and +0.083); at int8 min-max is as good (-0.0007 +- 0.0007)
SEARCHED_BY_DEFAULT = ("int4", "int2")


@register_embedding("quantized")
class QuantizedEmbedding(EmbeddingBase):
    """An embedding table kept in a low-precision format; a lookup decodes only the rows asked for.
    Lookups: the EmbeddingBase contract, in ``output_dtype``; EdoValueError names an unknown
    ``storage_format``, ``mode`` or ``output_dtype`` and lists the supported ones.

    Storage (``packed``): fp16/bf16 tables as such; code formats as int8 bytes, ``ceil(dim * bits / 8)``
    per row, plus fp16 row parameters (scale and bias for intN, 4 bytes; scale for ternary/binary, 2
    bytes). The padding row decodes to exactly zero.

    Modes:
      - ``ptq``: trains an fp32 master table; ``pack()`` quantizes it after training.
      - ``qat``: fp32 master table, lookups fake-quantized (straight-through gradient); ``pack()`` after.
      - ``low_precision``: packed from the start, no fp32 master; each step's row gradients are applied
        by the layer (``apply_row_updates``: SGD or row-wise Adagrad) and written back with stochastic
        rounding, so small updates survive on average. fp16, bf16 and int8 only.
    """

    row_shardable = True

    config_options = {
        "storage_format": Option("int8", str, choices=tuple(FORMATS), doc="how rows are stored (not a Paddle "
                                                                          "dtype: int4, ternary, binary are none)"),
        "mode": Option("ptq", str, choices=MODES, doc="how the table trains"),
        "init_std": Option(0.01, float, low=0.0, doc="std of the normal initialiser"),
        "deduplicate": Option(True, bool, doc="training lookups go through the batch's distinct ids"),
        "row_range": Option("auto", str, choices=ROW_RANGES, doc="intN rows' clip range: the one of least squared "
                                                                 "error ('search'), the row's min to max, or "
                                                                 "'auto' (search for int4 and int2)"),
        "output_dtype": Option("float32", str, choices=OUTPUT_DTYPES, doc="the dtype lookups return: float16 or "
                                                                         "bfloat16 for mixed precision (rounded to "
                                                                         "nearest, written by the lookup itself)"),
    }

    @accepts_old_signature(("num_embeddings", "embedding_dim", "dtype", "padding_idx", "sparse", "mode", "check_ids",
                            "init_std", "weight", "packed", "deduplicate"), renamed={"dtype": "storage_format"},
                           is_old=lambda args, kwargs: len(args) > 4 or (len(args) == 4 and not isinstance(args[3], str)))
    def __init__(self, num_embeddings: int, embedding_dim: int, storage_format: str = "int8", mode: str = "ptq", *,
                 padding_idx: int | None = None, sparse: bool = True, weight_attr: paddle.ParamAttr | None = None,
                 name: str | None = None, init_std: float = 0.01, weight: paddle.Tensor | None = None,
                 packed: bool | None = None, deduplicate: bool = True, row_range: str = "auto",
                 range_check: bool = True, output_dtype: str = "float32") -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=sparse, name=name,
                         range_check=range_check)
        self.deduplicate = bool(deduplicate)
        label = type(self).__name__
        self.format: QuantFormat = get_format(storage_format, f"{label}: storage_format")
        if mode not in MODES:
            raise EdoValueError(f"{label}: mode = {mode!r} is not supported; supported: {', '.join(MODES)}")
        if mode == "low_precision" and storage_format not in LOW_PRECISION_DTYPES:
            raise EdoValueError(f"{label}: mode 'low_precision' stores {', '.join(LOW_PRECISION_DTYPES)} tables; "
                                f"storage_format {storage_format!r} needs mode 'qat' or 'ptq'")
        if row_range not in ROW_RANGES:
            raise EdoValueError(f"{label}: row_range = {row_range!r} is not supported; supported: "
                                f"{', '.join(ROW_RANGES)}")
        if output_dtype not in OUTPUT_DTYPES:
            raise EdoValueError(f"{label}: output_dtype = {output_dtype!r} is not supported; supported: "
                                f"{', '.join(OUTPUT_DTYPES)}")
        self.mode = mode
        self.row_range = row_range
        self.output_dtype = output_dtype
        self.init_std = init_std
        self.initializer = weight_attr.initializer if weight_attr is not None else None
        self.row_optimizer: str | None = None
        self._touched: list[tuple[paddle.Tensor, paddle.Tensor]] = []
        if weight is not None and list(weight.shape) != [self.num_embeddings, self.embedding_dim]:
            raise EdoValueError(f"{label}: weight of shape {list(weight.shape)}, expected "
                                f"{[self.num_embeddings, self.embedding_dim]}")
        self.packed = mode == "low_precision" if packed is None else packed
        if self.packed:
            self._store(weight)
        else:
            self.weight = self.create_table(self.num_embeddings, self.embedding_dim, weight_attr, init_std)
            if weight is not None:
                with paddle.no_grad():
                    self.weight.set_value(weight.astype("float32"))
                    if self.padding_idx is not None:
                        self.weight[self.padding_idx] = 0.0

    # ------------------------------------------------------------- storage
    @property
    def codes_name(self) -> str:
        return f"{self.format.name}_codes"

    @property
    def params_name(self) -> str:
        return f"{self.format.name}_row_params"

    @property
    def codes(self) -> paddle.Tensor:
        return getattr(self, self.codes_name)

    @property
    def row_params(self) -> paddle.Tensor | None:
        return getattr(self, self.params_name, None)

    def _source_chunk(self, weight: paddle.Tensor | None, start: int, stop: int) -> paddle.Tensor:
        if weight is None and self.initializer is not None:
            chunk = paddle.zeros([stop - start, self.embedding_dim])
            self.initializer(chunk)
        elif weight is None:  # keyed by global row: a rank's share of a table draws the rows the whole would
            share = share_being_built()
            rows = np.arange(start, stop, dtype=np.int64)
            rows = share.global_ids(rows) if share is not None else rows
            chunk = paddle.to_tensor(keyed_normal(self._init_seed, rows, self.embedding_dim, self.init_std))
        else:
            chunk = weight[start:stop].astype("float32")
        if self.padding_idx is not None and start <= self.padding_idx < stop:
            chunk[self.padding_idx - start] = 0.0
        return chunk

    def _store(self, weight: paddle.Tensor | None, frequencies: np.ndarray | None = None) -> None:
        """Encode fp32 rows (or a fresh normal initialisation) chunk by chunk into packed buffers allocated
        once (a table's codes are never held twice); given rows, record how far the packed rows are from
        them (``packing_error``)."""
        if weight is not None:
            check_quantizable(weight, self.format, self.full_name())
        if weight is None and self.initializer is None:  # one draw, whatever the table's size
            self._init_seed = int(paddle.randint(0, 2 ** 31 - 1, [1]).item())
        codes = params = None
        errors = []
        with paddle.no_grad():
            for start in range(0, self.num_embeddings, ENCODE_CHUNK_ROWS):
                stop = min(start + ENCODE_CHUNK_ROWS, self.num_embeddings)
                chunk = self._source_chunk(weight, start, stop)
                chunk_codes, chunk_params = self._encode(chunk)
                if codes is None:
                    codes = paddle.empty([self.num_embeddings, *chunk_codes.shape[1:]], dtype=chunk_codes.dtype)
                    if chunk_params is not None:
                        params = paddle.empty([self.num_embeddings, *chunk_params.shape[1:]], dtype=chunk_params.dtype)
                codes[start:stop] = chunk_codes
                if params is not None:
                    params[start:stop] = chunk_params
                if weight is not None:
                    decoded = codecs.decode(chunk_codes, chunk_params, self.format, self.embedding_dim)
                    errors.append(relative_row_errors(chunk, decoded))
        self.register_buffer(self.codes_name, codes)
        if params is not None:
            self.register_buffer(self.params_name, params)
        self.packed = True
        if errors:
            self.packing_error = weighted_mean(np.concatenate(errors), frequencies)

    @property
    def range_iterations(self) -> int:
        """Rounds of codecs.search_range for this table's rows (0: min-max ranges)."""
        searched = self.row_range == "search" or (self.row_range == "auto" and self.format.name in SEARCHED_BY_DEFAULT)
        return codecs.RANGE_ITERATIONS if searched and self.format.row_params == 2 else 0

    def _encode(self, rows: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor | None]:
        """encode_nearest of fp32 rows on this table's ranges."""
        return encode_nearest(rows, self.format, self.range_iterations)

    def pack(self, frequencies: np.ndarray | None = None) -> "QuantizedEmbedding":
        """Quantize the fp32 master table into packed storage and drop the master (ptq / qat, after
        training); ``packing_error`` is then the mean relative L2 error of the packed rows against the
        master's, weighted by ``frequencies`` (a count per id) when given."""
        if not self.packed:
            weight = self.weight.detach()
            master_bytes = int(weight.size) * weight.element_size()
            del self._parameters["weight"]
            self._store(weight, frequencies)
            del weight
            if master_bytes >= RELEASE_FROM_BYTES:
                release_freed_memory()
        return self

    @property
    def storage_dtype(self) -> str:
        return self.format.name if self.packed else "float32"

    def estimated_bytes(self) -> int:
        if not self.packed:
            return self.num_embeddings * self.embedding_dim * 4
        state = self.num_embeddings * 4 if self.row_optimizer == "adagrad" else 0
        return self.num_embeddings * self.format.row_bytes(self.embedding_dim) + state

    # -------------------------------------------------------------- lookup
    def decode_rows(self, ids: paddle.Tensor, dtype: str = "float32") -> paddle.Tensor:
        """Rows of the given ids decoded from packed storage, as ``dtype`` (float16 / bfloat16 rounded as
        codecs.round_to_float rounds): by the fused CPU kernel where it may serve (the same values, bit for
        bit), else by Paddle's composite ops."""
        if kernels_serve(ids, self.codes):
            return self._served_decode(ids, dtype)
        return self._composite_decode(ids, dtype)

    def _served_decode(self, ids: paddle.Tensor, dtype: str) -> paddle.Tensor:
        """decode_rows by the faster path of its class: the kernel, or the composite decode after a scan."""
        return serve(self._decode_class(ids, dtype), lambda: self._native_decode(ids, dtype),
                     lambda: self._scanned_decode(ids, dtype))

    def _native_decode(self, ids: paddle.Tensor, dtype: str) -> paddle.Tensor:
        """kernels/quantized.cc's gather-decode: it refuses ids outside the table before reading a row."""
        params = self.codes if self.row_params is None else self.row_params  # float formats: unused
        lookup = getattr(fused_ops(), FUSED_LOOKUPS[dtype])
        with ids_checked_by_kernel(self.full_name(), self.num_embeddings):
            return lookup(int64_ids(ids), self.codes, params, FORMAT_NUMBERS[self.format.name], self.embedding_dim,
                          False, 0)

    def _composite_decode(self, ids: paddle.Tensor, dtype: str) -> paddle.Tensor:
        codes = F.embedding(ids, self.codes)
        params = None if self.row_params is None else F.embedding(ids, self.row_params)
        rows = codecs.decode(codes, params, self.format, self.embedding_dim)
        return rows if dtype == "float32" else codecs.round_to_float(rows, dtype)

    def _scanned_decode(self, ids: paddle.Tensor, dtype: str) -> paddle.Tensor:
        """The composite decode after a scan of the ids (the kernel it stands in for checks them)."""
        if self.range_check:
            self.scan_id_range(ids)
        return self._composite_decode(ids, dtype)

    def _decode_class(self, ids: paddle.Tensor, dtype: str) -> LookupClass:
        return lookup_class("decode", f"{self.format.name} -> {dtype}", self.embedding_dim, self.estimated_bytes(),
                            ids)

    @dynamic_graph_under_sot
    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        """ids [...] int32/int64 -> vectors [..., embedding_dim] in ``output_dtype``: EmbeddingBase.forward,
        with a packed lookup's path chosen once for the range check and the decode (a dynamic-graph call
        costs microseconds per choice)."""
        self.check_id_dtype(ids)
        if known_empty(ids):
            return self.empty_lookup(ids)
        if self.packed and not (self.mode == "low_precision" and self.training) and kernels_serve(ids, self.codes):
            return self._served_decode(ids, self.output_dtype)  # as lookup() would; its paths check the ids
        if self.range_check and paddle.in_dynamic_mode():
            self.scan_id_range(ids)
        return self.lookup(ids)

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        if not self.packed:
            if self.deduplicates():  # fake-quantizes each row once
                unique, inverse = unique_ids(ids)
                rows = distinct_rows(unique, self.weight, self.padding_idx)
                return self._as_output(F.embedding(inverse, self._master_rows(rows)))
            return self._as_output(self._master_rows(F.embedding(ids, self.weight, padding_idx=self.padding_idx,
                                                                 sparse=sparse_gradient(self.sparse))))
        if self.mode == "low_precision" and self.training:
            if not paddle.in_dynamic_mode():
                raise EdoRuntimeError(f"{self.full_name()}: a low_precision table updates its rows in dynamic graph; "
                                      f"train it there or under paddle.jit.to_static's default mode (SOT), not in "
                                      f"a whole-graph program (full_graph=True); call .eval() before exporting it")
            if paddle.is_grad_enabled():
                return self._as_output(self._lookup_for_update(ids))
        return self.decode_rows(ids, self.output_dtype)

    def empty_lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        """A batch without ids: zeros ``[*ids.shape, embedding_dim]`` in ``output_dtype``."""
        return paddle.zeros([*ids.shape, self.embedding_dim], dtype=self.output_dtype)

    def _as_output(self, rows: paddle.Tensor) -> paddle.Tensor:
        """Training's fp32 rows in ``output_dtype``: the values a packed lookup returns (round to nearest),
        with the identity as their gradient."""
        if self.output_dtype == "float32":
            return rows
        rounded = codecs.round_to_float(rows.detach(), self.output_dtype).astype("float32")
        return codecs.straight_through(rows, rounded).astype(self.output_dtype)

    def kernel_checks_ids(self, ids: paddle.Tensor) -> bool:
        """A packed table's lookups outside low_precision training take the gather-decode kernel, which
        refuses ids outside the table before reading them (or, where Paddle's ops serve faster, a scan)."""
        return self.packed and not self.updates_rows() and kernels_serve(ids, self.codes)

    def updates_rows(self) -> bool:
        """Whether lookups now decode rows for this step's update: a low_precision table training with
        gradients."""
        return self.mode == "low_precision" and self.training and paddle.is_grad_enabled()

    @paddle.jit.not_to_static  # to_static evaluates this condition even for packed tables, which have no weight
    def deduplicates(self) -> bool:
        """Whether lookups now go through the distinct ids: an fp32 master table training with sparse
        gradients, in dynamic graph."""
        return not self.packed and self.deduplicate and deduplicating(self)

    def _master_rows(self, rows: paddle.Tensor) -> paddle.Tensor:
        """Rows of the fp32 master table as training sees them: fake-quantized in QAT (by the fused CPU
        kernel where it serves: the same values, bit for bit)."""
        if self.mode != "qat":
            return rows
        if self.format.name in FUSED_FAKE_QUANTIZATION and paddle.in_dynamic_mode() and rows.place.is_cpu_place() \
                and fused_ops() is not None:
            with paddle.no_grad():
                flat = rows.detach().reshape([-1, self.embedding_dim])
                quantized = fused_ops().edo_fake_quantize(flat, FORMAT_NUMBERS[self.format.name],
                                                          self.range_iterations).reshape(rows.shape)
            return codecs.straight_through(rows, quantized)
        return codecs.fake_quantize(rows, self.format, self.range_iterations)

    def _lookup_for_update(self, ids: paddle.Tensor) -> paddle.Tensor:
        """Decode each distinct row once as a leaf tensor whose gradient apply_row_updates reads."""
        if self.row_optimizer is None and getattr(self, "row_trainer", None) is None:
            raise EdoRuntimeError(f"{self.full_name()}: call configure_row_optimizer('sgd' or 'adagrad'), or give "
                                  f"the table to a RowTrainer, before training a low_precision table")
        unique, inverse = unique_ids(ids)
        rows = self.decode_rows(unique)
        rows.stop_gradient = False
        self._touched.append((unique, rows))
        return F.embedding(inverse, rows)

    # ------------------------------------------------------------ training
    def configure_row_optimizer(self, name: str) -> None:
        """Choose how low_precision rows are updated: 'sgd' or 'adagrad' (one fp32 state per row)."""
        if name not in ROW_OPTIMIZERS:
            raise EdoValueError(f"{self.full_name()}: low_precision tables update rows with "
                                f"{' or '.join(ROW_OPTIMIZERS)}, not {name!r}")
        self.row_optimizer = name
        if name == "adagrad" and getattr(self, "row_sum_sq", None) is None:
            self.register_buffer("row_sum_sq", paddle.zeros([self.num_embeddings], dtype="float32"))

    def row_gradients(self) -> tuple[paddle.Tensor, paddle.Tensor] | None:
        """(row ids, row gradients) of this step's lookups before apply_row_updates, for monitors;
        None when this table trains through an optimizer (its weight gradient says it all)."""
        touched = self._touched_with_gradients()
        if not touched:
            return None
        return paddle.concat([i for i, _, _ in touched]), paddle.concat([g for _, _, g in touched])

    def _touched_with_gradients(self) -> list[tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]]:
        """(distinct ids, their decoded rows, the rows' gradients) of each of this step's lookups that
        received a gradient."""
        return [(ids, rows, rows.grad) for ids, rows in self._touched if rows.grad is not None]

    @paddle.no_grad()
    def apply_row_updates(self, learning_rate: float) -> None:
        """Apply the row gradients of this step's lookups with the row rule configure_row_optimizer chose,
        then re-encode those rows stochastically."""
        merged = self._merged_row_gradients()
        if merged is None:
            return
        unique, rows, grad = merged
        if self.padding_idx is not None:
            grad = grad * (unique != self.padding_idx).astype("float32").unsqueeze(-1)
        if self.row_optimizer == "adagrad":
            state = paddle.gather(self.row_sum_sq, unique) + grad.square().mean(axis=1)
            self.row_sum_sq.scatter_(unique, state)
            step = grad / (state.sqrt() + ADAGRAD_EPSILON).unsqueeze(-1)
        else:
            step = grad
        self._write_rows(unique, rows - learning_rate * step)

    @paddle.no_grad()
    def apply_table_rule(self, states: TableStates) -> None:
        """Apply a TableOptimizer's rule (``states``: this table's, e.g. row-wise Adam with 8-bit state) to
        the rows of this step's lookups, by their summed gradients, then re-encode those rows stochastically
        (the way a RowTrainer trains a low_precision table)."""
        merged = self._merged_row_gradients()
        if merged is None:
            return
        unique, rows, grad = merged  # rows: decoded for this step alone, so updated in place
        states.update_rows(rows, unique, grad.astype("float32"), -1 if self.padding_idx is None else self.padding_idx,
                           place_of(self))
        self._write_rows(unique, rows)

    def _merged_row_gradients(self) -> tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor] | None:
        """(distinct ids, their decoded rows, their summed gradients) of this step's lookups, forgetting them;
        None when none received a gradient."""
        touched = self._touched_with_gradients()
        self._touched.clear()
        if not touched:
            return None
        if len(touched) == 1:  # one lookup: its distinct ids, their decoded rows, one gradient each
            unique, rows, grad = touched[0]
            return unique, rows.detach(), grad
        unique, grad = summed_by_id(paddle.concat([i for i, _, _ in touched]),
                                    paddle.concat([g for _, _, g in touched]))
        return unique, self.decode_rows(unique), grad

    def _write_rows(self, unique: paddle.Tensor, updated: paddle.Tensor) -> None:
        """Encode updated rows into the table with stochastic rounding, keyed by each row's place in the whole
        table (a share rounds its rows as the whole table would)."""
        share = getattr(self, "row_share", None)
        seed = rounding_seed(self.full_name())
        if kernels_serve(unique, self.codes):
            params = paddle.zeros([1], dtype="float16") if self.row_params is None else self.row_params
            fused_ops().edo_write_rows(self.codes, params, unique, updated, FORMAT_NUMBERS[self.format.name], seed,
                                       *place_of(self))
            return
        noise = rounding_noise(unique, self.embedding_dim, seed, share.global_ids if share is not None else None)
        codes, params = codecs.encode(updated, self.format, stochastic=True, noise=noise)
        paddle.index_put_(self.codes, (unique,), codes)
        if params is not None:
            paddle.index_put_(self.row_params, (unique,), params)

    # ---------------------------------------------------------- conversion
    @classmethod
    def from_embedding(cls, embedding: paddle.nn.Layer, storage_format: str = "int8", row_range: str = "auto",
                       frequencies: np.ndarray | None = None, output_dtype: str = "float32") -> "QuantizedEmbedding":
        """A packed copy of a ``paddle.nn.Embedding`` or ``DenseEmbedding`` (padding row and sparsity kept);
        ``row_range``: 'search' (each intN row's range of least squared error), 'min_max', or 'auto';
        ``packing_error`` weighted by ``frequencies`` (a count per id) when given; lookups return
        ``output_dtype``."""
        weight = embedding.weight
        if len(weight.shape) != 2:
            raise EdoValueError(f"from_embedding: {embedding.full_name()} has a weight of shape {weight.shape}")
        padding_idx, sparse = table_settings(embedding)
        table = cls(weight.shape[0], weight.shape[1], storage_format, padding_idx=padding_idx, sparse=sparse,
                    weight=weight.detach(), packed=True, row_range=row_range, output_dtype=output_dtype)
        if frequencies is not None:
            table.packing_error = table.row_error(weight, frequencies)
        return table

    @paddle.no_grad()
    def row_error(self, weight: paddle.Tensor, frequencies: np.ndarray | None = None) -> float:
        """Mean relative L2 error of this packed table's rows against ``weight`` [N, D] (rows of zero norm
        count 0 when decoded to zero), weighted by ``frequencies`` when given."""
        errors = [relative_row_errors(weight[start:start + ENCODE_CHUNK_ROWS].astype("float32"),
                                      self.decode_rows(paddle.arange(start, min(start + ENCODE_CHUNK_ROWS,
                                                                                self.num_embeddings))))
                  for start in range(0, self.num_embeddings, ENCODE_CHUNK_ROWS)]
        return weighted_mean(np.concatenate(errors), frequencies)

    @paddle.no_grad()
    def dequantize(self) -> paddle.nn.Embedding:
        """An fp32 ``paddle.nn.Embedding`` holding the decoded table."""
        out = paddle.nn.Embedding(self.num_embeddings, self.embedding_dim, padding_idx=self.padding_idx,
                                  sparse=self.sparse)
        if not self.packed:
            out.weight.set_value(self.weight.detach())
            return out
        rows = [self.decode_rows(paddle.arange(start, min(start + ENCODE_CHUNK_ROWS, self.num_embeddings)))
                for start in range(0, self.num_embeddings, ENCODE_CHUNK_ROWS)]
        out.weight.set_value(paddle.concat(rows) if len(rows) > 1 else rows[0])
        return out

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        """Refuse mode / storage_format / optimizer / AMP combinations that cannot train."""
        embedding, train = config["embedding"], config["train"]
        if embedding["mode"] != "low_precision":
            return
        if embedding["storage_format"] not in LOW_PRECISION_DTYPES:
            raise ConfigError(f"embedding.storage_format = {embedding['storage_format']!r} cannot train in mode 'low_precision' "
                              f"(allowed: {', '.join(LOW_PRECISION_DTYPES)}); use embedding.mode=qat or ptq")
        if train["optimizer"] not in ROW_OPTIMIZERS and train["table_optimizer"]["name"] is None:
            raise ConfigError(f"train.optimizer = {train['optimizer']!r} does not work with embedding.mode "
                              f"'low_precision', whose rows are updated by the layer; use one of "
                              f"{', '.join(repr(o) for o in ROW_OPTIMIZERS)} (adagrad is row-wise: 4 bytes per row), "
                              f"or set train.table_optimizer.name (e.g. rowwise_adam, adam with state_dtype int8)")
        if train["amp"]["enable"]:
            raise ConfigError("train.amp.enable = true does not work with embedding.mode 'low_precision' "
                              "(its row updates read unscaled gradients); turn one of them off")

    def extra_repr(self) -> str:
        output = "" if self.output_dtype == "float32" else f", output_dtype={self.output_dtype}"
        return super().extra_repr() + f", mode={self.mode}{output}"


def is_low_precision(layer: paddle.nn.Layer) -> bool:
    """Whether ``layer`` is a low_precision table (packed from the start, its rows updated by rows)."""
    return isinstance(layer, QuantizedEmbedding) and layer.mode == "low_precision"


def check_quantizable(weight: paddle.Tensor, fmt: QuantFormat, owner: str) -> None:
    """Refuse NaN / Inf rows, and values beyond fp16 where fp16 holds them (fp16 tables, row parameters)."""
    values = weight if weight.dtype == paddle.float32 else weight.astype("float32")
    limit = float(np.finfo(np.float32).max) if fmt.name == "bf16" else codecs.FLOAT_MAX["float16"]
    if values.size == 0 or (max(-float(values.min()), float(values.max())) <= limit
                            and bool(paddle.isfinite(values).all())):
        return   # the common case, in two cheap passes; the bad rows are looked for only otherwise
    bad = paddle.nonzero(~paddle.isfinite(values).all(axis=1)).flatten().numpy()
    if bad.size:
        raise EdoValueError(f"{owner}: rows {_rows(bad)} hold NaN or Inf; a table with them cannot be quantized")
    if fmt.name != "bf16":
        big = paddle.nonzero((values.abs() > limit).any(axis=1)).flatten().numpy()
        if big.size:
            raise EdoValueError(f"{owner}: rows {_rows(big)} hold values beyond +-{limit:g}, which {fmt.name} "
                                f"stores in fp16; use storage_format 'bf16' or rescale the table")


def _rows(rows: np.ndarray) -> str:
    shown = ", ".join(str(int(r)) for r in rows[:10])
    return f"[{shown}{', ...' if rows.size > 10 else ''}] ({rows.size} in all)"


def relative_row_errors(rows: paddle.Tensor, decoded: paddle.Tensor) -> np.ndarray:
    """||x - x_hat|| / ||x|| of each row ([R]); a zero row counts 0 decoded to zero, else 1."""
    difference = (decoded - rows).square().sum(axis=1).sqrt().numpy().astype(np.float64)
    norms = rows.square().sum(axis=1).sqrt().numpy().astype(np.float64)
    return np.where(norms > 0, difference / np.where(norms > 0, norms, 1.0), np.where(difference > 0, 1.0, 0.0))


def weighted_mean(values: np.ndarray, weights: np.ndarray | None) -> float:
    """The mean of ``values``, weighted by ``weights`` when given (and not all zero)."""
    if weights is None or not np.asarray(weights, dtype=np.float64).sum() > 0:
        return float(values.mean())
    return float(np.average(values, weights=np.asarray(weights, dtype=np.float64)))
