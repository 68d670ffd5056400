"""Export to a static model (paddle.jit.save) and run it with the Paddle Inference predictor."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import paddle

from .compat import PIR_PROGRAMS
from .data.ctr import FieldSpec
from .errors import EdoFileNotFoundError, EdoRuntimeError, EdoValueError
from .kernels import fused_ops, fused_static_programs
from .runtime import openmp_threads_kept

PROGRAM_SUFFIXES = (".json", ".pdmodel")  # what paddle.jit.save writes: a PIR program (Paddle 3), a legacy one (2.6)
FUSED_OPS = ("edo_hash_lookup", "edo_qr_lookup", "edo_mixed_dim_lookup", "edo_quantized_lookup",
             "edo_quantized_lookup_fp16", "edo_quantized_lookup_bf16", "edo_bag_pool",
             "edo_packed_bag_pool")  # the lookup kernels' custom operators (paddle_edo/kernels)


def input_specs(fields: Sequence[FieldSpec], num_dense: int = 0) -> list[paddle.static.InputSpec]:
    """One int64 input per field: [batch] or [batch, max_len] for multi-valued fields; then ``dense``
    float32 [batch, num_dense] when there are dense features."""
    specs = [paddle.static.InputSpec([None, f.max_len] if f.multi_valued else [None], "int64", name=f.name)
             for f in fields]
    return specs + ([paddle.static.InputSpec([None, num_dense], "float32", name="dense")] if num_dense else [])


def to_static(model: paddle.nn.Layer, specs: Sequence[paddle.static.InputSpec]) -> paddle.nn.Layer:
    """The model under paddle.jit.to_static with a whole graph (what jit.save needs); its forward
    takes the list of inputs the specs describe."""
    model.eval()
    return paddle.jit.to_static(model, input_spec=[list(specs)], full_graph=True)


def export_model(model: paddle.nn.Layer, specs: Sequence[paddle.static.InputSpec], path_prefix: str | Path,
                 fused_kernels: bool = False) -> Path:
    """Save the model for Paddle Inference: ``<prefix>.pdiparams`` and the program, ``<prefix>.json`` on
    Paddle 3 (PIR) or ``<prefix>.pdmodel`` on 2.6 (``program_file`` says which); returns the prefix.
    ``fused_kernels``: the shared tables' lookups are paddle_edo's fused CPU kernels (custom operators)
    in the saved program, as in dygraph serving; the model then runs on the CPU, in a process that loads
    paddle_edo's kernels (``Predictor`` does). Without, it needs nothing but Paddle."""
    if fused_kernels and fused_ops() is None:
        raise EdoRuntimeError("export.fused_kernels = true, but paddle_edo's kernels cannot be built here (no C++ "
                              "compiler?); run `python -m paddle_edo.kernels` to see why, or export without them")
    path_prefix = Path(path_prefix)
    path_prefix.parent.mkdir(parents=True, exist_ok=True)
    for suffix in PROGRAM_SUFFIXES:  # an earlier export's program of the other kind would be found first
        path_prefix.with_name(path_prefix.name + suffix).unlink(missing_ok=True)
    with fused_static_programs(fused_kernels):
        paddle.jit.save(to_static(model, specs), str(path_prefix))
    if program_file(path_prefix).suffix == ".pdmodel":
        drop_output_copies(program_file(path_prefix))
    return path_prefix


def drop_output_copies(model_file: Path) -> None:
    """Remove the ``scale(x, 1.0)`` that Paddle 2.6's ``jit.save`` puts before each fetched output (to
    name it) from a legacy program, fetching ``x`` itself. Each one copies the whole output in one
    thread: measured on 4096 x 26 lookups of 64 floats, the predictor's run took 7.1 ms with it and 3.0 ms
    without. Paddle 3's programs have none. An output that is a fed input keeps its copy. The file is
    replaced atomically."""
    from paddle.base.proto import framework_pb2

    program = framework_pb2.ProgramDesc()
    program.ParseFromString(model_file.read_bytes())
    block = program.blocks[0]
    producer = {name: op for op in block.ops for slot in op.outputs for name in slot.arguments}

    def copied_from(name: str) -> str | None:
        op = producer.get(name)
        if op is None or op.type != "scale" or any(s.parameter == "ScaleTensor" and s.arguments for s in op.inputs):
            return None
        attrs = {a.name: a.f for a in op.attrs if a.name in ("scale", "bias")}
        (source,) = [s.arguments[0] for s in op.inputs if s.parameter == "X"]
        made = producer.get(source)
        return source if attrs == {"scale": 1.0, "bias": 0.0} and made is not None and made.type != "feed" else None

    dropped = set()
    for slot in (slot for op in block.ops if op.type == "fetch" for slot in op.inputs if slot.parameter == "X"):
        source = copied_from(slot.arguments[0])
        if source is not None:
            dropped.add(slot.arguments[0])
            slot.arguments[0] = source
    if not dropped:
        return
    keep_ops = [op for op in block.ops if not set(a for s in op.outputs for a in s.arguments) & dropped]
    keep_vars = [v for v in block.vars if v.name not in dropped]
    del block.ops[:], block.vars[:]
    block.ops.extend(keep_ops)
    block.vars.extend(keep_vars)
    partial = model_file.with_name(model_file.name + ".partial")
    partial.write_bytes(program.SerializeToString())
    partial.replace(model_file)


def program_file(path_prefix: str | Path) -> Path:
    """The program an export wrote beside ``path_prefix``: ``.json`` (PIR) or ``.pdmodel`` (legacy)."""
    path_prefix = Path(path_prefix)
    for suffix in PROGRAM_SUFFIXES:
        path = path_prefix.with_name(path_prefix.name + suffix)
        if path.is_file():
            return path
    raise EdoFileNotFoundError(f"no exported model at {path_prefix} (neither {path_prefix.name}.json nor "
                               f"{path_prefix.name}.pdmodel); run tools/export_model.py first")


def uses_fused_kernels(path_prefix: str | Path) -> bool:
    """Whether the program saved at ``path_prefix`` holds paddle_edo's fused lookup operators."""
    program = program_file(path_prefix).read_bytes()
    return any(op.encode() in program for op in FUSED_OPS)


class Predictor:
    """A Paddle Inference predictor over an exported model; device chosen at run time."""

    def __init__(self, path_prefix: str | Path, device: str = "auto", num_threads: int = 2) -> None:
        from paddle import inference

        path_prefix = Path(path_prefix)
        model_file = program_file(path_prefix)
        if model_file.suffix == ".json" and not PIR_PROGRAMS:
            raise EdoRuntimeError(f"{model_file} is a Paddle 3 (PIR) program, which Paddle {paddle.__version__} "
                                  f"cannot read; serve it with Paddle 3, or export the model again with this Paddle")
        params_file = path_prefix.with_name(path_prefix.name + ".pdiparams")
        fused = uses_fused_kernels(path_prefix)
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
            config.disable_mkldnn()  # Paddle 3's oneDNN passes change the arithmetic: the served values would
            config.set_cpu_math_library_num_threads(num_threads)  # differ from dygraph's (measured: 1e-3)
        config.disable_glog_info()
        with openmp_threads_kept():   # creating and running a predictor set the caller's threads
            self.predictor = inference.create_predictor(config)
        self.input_names = self.predictor.get_input_names()
        self._bfloat16_output = False  # known after the first run

    def run(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """Inputs in the order of the exported input specs, batch first; returns the first output. An empty
        batch gets an empty output: the program runs on a batch of one padding row (id 0) and none of its
        output is kept, since Paddle 2.6.2's programs fail on empty inputs. A bfloat16 output comes as
        float32 on Paddle 3, and is refused on 2.6 (EdoRuntimeError: its predictor copies none out)."""
        if len(inputs) != len(self.input_names):
            raise EdoValueError(f"the model takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                                f"got {len(inputs)}")
        if inputs and all(np.ndim(value) and len(value) == 0 for value in inputs):
            return self._run([np.zeros((1, *np.shape(value)[1:]), dtype=np.asarray(value).dtype)
                              for value in inputs])[:0]
        return self._run(inputs)

    def _run(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        if self._bfloat16_output:
            return self._run_on_tensors(inputs)
        for name, value in zip(self.input_names, inputs):
            handle = self.predictor.get_input_handle(name)
            handle.reshape(list(value.shape))
            handle.copy_from_cpu(np.ascontiguousarray(value))
        with openmp_threads_kept():
            self.predictor.run()
        output = self.predictor.get_output_handle(self.predictor.get_output_names()[0])
        if getattr(output.type(), "name", "") == "BFLOAT16":  # Paddle 3 copies it out as float32: wrong values
            self._bfloat16_output = True
            return self._run_on_tensors(inputs)
        try:
            return output.copy_to_cpu()
        except NotImplementedError as error:  # Paddle 2.6, a bfloat16 output
            raise EdoRuntimeError(f"the model's output is not one Paddle {paddle.__version__}'s predictor copies out "
                                  f"({error}): serve a bfloat16 output with Paddle 3, or export the table with "
                                  f"output_dtype 'float16' or 'float32'") from None

    def _run_on_tensors(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """Paddle 3's run on paddle tensors, for a bfloat16 output: widened to float32 (exactly; numpy has no
        bfloat16)."""
        with openmp_threads_kept():
            outputs = self.predictor.run([paddle.to_tensor(np.ascontiguousarray(value)) for value in inputs])
        return outputs[0].astype("float32").numpy()
