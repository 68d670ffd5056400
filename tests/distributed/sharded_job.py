"""A job of the sharded-training tests, run by tests/distributed/test_sharded.py under
``paddle.distributed.launch`` (or as one process): trains each named case of a small synthetic DeepFM for a
few steps and writes its sharded checkpoint under <root>/<case>/world<N>.

  python -m paddle.distributed.launch --nproc_per_node N tests/distributed/sharded_job.py ROOT CASE ...
"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from paddle_edo.config import load_config  # noqa: E402
from paddle_edo.engine import Engine  # noqa: E402

TYPES = {
    "dense": [],
    "qat": ["embedding.type=quantized", "embedding.storage_format=int8", "embedding.mode=qat"],
    "low_precision": ["embedding.type=quantized", "embedding.storage_format=int8", "embedding.mode=low_precision"],
    "cached": ["embedding.type=cached", "embedding.cache_ratio=0.5", "embedding.min_cache_rows=8"],
}


def case_overrides(case: str) -> list[str]:
    """'<type>-<optimizer>' -> the overrides of its run."""
    kind, optimizer = case.rsplit("-", 1)
    return [*TYPES[kind], f"train.optimizer={optimizer}"]


def config_for(case: str, output_dir: Path, extra: list[str] = ()) -> dict:
    return load_config(ROOT / "configs" / "synthetic_dense.yaml", [
        "data.synthetic.num_samples=1500", "data.synthetic.num_fields=3", "data.synthetic.rows_per_field=300",
        "model.hidden_units=[16]", "embedding.dim=8", "train.epochs=1", "train.batch_size=256",
        "train.learning_rate=0.01", "train.num_threads=1", "distributed.mode=sharded",
        "distributed.shard_min_rows=0", f"train.output_dir={output_dir}", *case_overrides(case), *extra])


def main() -> None:
    root, cases = Path(sys.argv[1]), sys.argv[2:]
    world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    for case in cases:
        engine = Engine(config_for(case, root / case / f"world{world}"))
        engine.train_epochs(validate=False)
    print("paddle_edo: finished as sharded test job", flush=True)


if __name__ == "__main__":
    main()
