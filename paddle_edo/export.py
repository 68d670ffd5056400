"""Export to a static model (paddle.jit.save) and run it with the Paddle Inference predictor."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import paddle

from .data.ctr import FieldSpec
from .errors import EdoFileNotFoundError, EdoRuntimeError, EdoValueError
from .kernels import fused_ops, fused_static_programs

FUSED_OPS = ("edo_hash_lookup", "edo_qr_lookup", "edo_mixed_dim_lookup", "edo_quantized_lookup",
             "edo_bag_pool", "edo_packed_bag_pool")  # the custom operators of kernels/lookups.cc


def input_specs(fields: Sequence[FieldSpec]) -> list[paddle.static.InputSpec]:
    """One int64 input per field: [batch] or [batch, max_len] for multi-valued fields."""
    return [paddle.static.InputSpec([None, f.max_len] if f.multi_valued else [None], "int64", name=f.name)
            for f in fields]


def to_static(model: paddle.nn.Layer, specs: Sequence[paddle.static.InputSpec]) -> paddle.nn.Layer:
    """The model under paddle.jit.to_static with a whole graph (what jit.save needs); its forward
    takes the list of inputs the specs describe."""
    model.eval()
    return paddle.jit.to_static(model, input_spec=[list(specs)], full_graph=True)


def export_model(model: paddle.nn.Layer, specs: Sequence[paddle.static.InputSpec], path_prefix: str | Path,
                 fused_kernels: bool = False) -> Path:
    """Save ``<prefix>.pdmodel`` / ``.pdiparams`` for Paddle Inference; returns the prefix.
    ``fused_kernels``: the shared tables' lookups are paddle_edo's fused CPU kernels (custom operators)
    in the saved program, as in dygraph serving; the model then runs on the CPU, in a process that loads
    paddle_edo's kernels (``Predictor`` does). Without, it needs nothing but Paddle."""
    if fused_kernels and fused_ops() is None:
        raise EdoRuntimeError("export.fused_kernels = true, but paddle_edo's kernels cannot be built here (no C++ "
                              "compiler?); run `python -m paddle_edo.kernels` to see why, or export without them")
    path_prefix = Path(path_prefix)
    path_prefix.parent.mkdir(parents=True, exist_ok=True)
    with fused_static_programs(fused_kernels):
        paddle.jit.save(to_static(model, specs), str(path_prefix))
    return path_prefix


def uses_fused_kernels(model_file: str | Path) -> bool:
    """Whether a saved program holds paddle_edo's fused lookup operators."""
    program = Path(model_file).read_bytes()
    return any(op.encode() in program for op in FUSED_OPS)


class Predictor:
    """A Paddle Inference predictor over an exported model; device chosen at run time."""

    def __init__(self, path_prefix: str | Path, device: str = "auto", num_threads: int = 2) -> None:
        from paddle import inference

        path_prefix = Path(path_prefix)
        model_file, params_file = path_prefix.with_suffix(".pdmodel"), path_prefix.with_suffix(".pdiparams")
        if not model_file.is_file():
            raise EdoFileNotFoundError(f"no exported model at {model_file}; run tools/export_model.py first")
        fused = uses_fused_kernels(model_file)
        if fused:
            if device == "gpu":
                raise EdoValueError(f"{model_file} was exported with export.fused_kernels = true: paddle_edo's fused "
                                    f"lookups run on the CPU only; serve it with device 'cpu' or 'auto', or export "
                                    f"it without them for the GPU")
            if fused_ops() is None:  # registers the operators with Paddle in this process
                raise EdoRuntimeError(f"{model_file} holds paddle_edo's fused lookups, but its kernels cannot be built "
                                      f"here; run `python -m paddle_edo.kernels` to see why")
        config = inference.Config(str(model_file), str(params_file))
        use_gpu = (not fused and device != "cpu" and paddle.is_compiled_with_cuda()
                   and paddle.device.cuda.device_count() > 0)
        if use_gpu:
            config.enable_use_gpu(256, 0)
        else:
            config.disable_gpu()
            config.set_cpu_math_library_num_threads(num_threads)
        config.disable_glog_info()
        self.predictor = inference.create_predictor(config)
        self.input_names = self.predictor.get_input_names()

    def run(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """Inputs in the order of the exported input specs; returns the first output."""
        if len(inputs) != len(self.input_names):
            raise EdoValueError(f"the model takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                                f"got {len(inputs)}")
        for name, value in zip(self.input_names, inputs):
            handle = self.predictor.get_input_handle(name)
            handle.reshape(list(value.shape))
            handle.copy_from_cpu(np.ascontiguousarray(value))
        self.predictor.run()
        return self.predictor.get_output_handle(self.predictor.get_output_names()[0]).copy_to_cpu()
