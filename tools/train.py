"""Train an experiment: python tools/train.py -c configs/X.yaml [-o key.path=value ...]"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import experiment_parser, fail_cleanly, learned_nothing, results_table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__)
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        from paddle_edo import load_config
        from paddle_edo.engine import Engine

        config = load_config(args.config, args.override)
        if config["distributed"]["mode"] == "ps":
            return run_parameter_server_process(config)
        if config["embedding"]["type"] == "auto":
            config = planned_config(config)
        if config["distributed"]["mode"] in ("collective", "sharded") and "PADDLE_TRAINER_ID" in os.environ:
            from paddle_edo.distributed.processes import exit_after

            exit_after(config["distributed"]["timeout_s"], f"trainer {os.environ['PADDLE_TRAINER_ID']} passed "
                       f"distributed.timeout_s = {config['distributed']['timeout_s']}")
        engine = Engine(config)
        print(engine.memory_report(), flush=True)
        results = engine.fit()
        if config["monitor"]["enable"]:
            logdir = config["monitor"]["logdir"] or Path(config["train"]["output_dir"]) / "vdl"
            print(f"VisualDL records in {logdir}: visualdl --logdir {logdir}")
        print(results_table(config, results, engine.memory_report(), engine.cache_statistics()))
        print(f"test auc {results['test_auc']:.4f}")
        print(f"test logloss {results['test_logloss']:.4f}")
        for key in sorted(k for k in results if k.startswith("test_") and k.endswith("_rmse")):
            print(f"test {key[len('test_'):-len('_rmse')]} rmse {results[key]:.4f}")
        if config["distributed"]["mode"] in ("collective", "sharded"):
            from paddle_edo.distributed.processes import FINISHED

            write_rank_results(Path(config["train"]["output_dir"]), engine.rank, results)
            print(f"{FINISHED} trainer {engine.rank}", flush=True)
        return learned_nothing(results)


def write_rank_results(output_dir: Path, rank: int, results: dict) -> None:
    """results.rank<r>.json: this rank's results, its speed, its peak resident memory (ru_maxrss) and its
    peak address space (VmPeak, what RLIMIT_AS bounds)."""
    import json
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with open("/proc/self/status") as status:
        virtual = next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmPeak")), None)
    (output_dir / f"results.rank{rank}.json").write_text(
        json.dumps({**results, "peak_rss_bytes": peak, "peak_virtual_bytes": virtual}, indent=2))


def planned_config(config: dict) -> dict:
    """embedding.type auto: plan the tables for embedding.budget first, keep the plan beside the run."""
    from paddle_edo import load_config
    from paddle_edo.planner import plan_tables

    plan = plan_tables(config)
    path = plan.write(Path(config["train"]["output_dir"]) / "plan.yaml")
    print(plan.table(), flush=True)
    print(f"planned config: {path}", flush=True)
    return load_config(path)


def run_parameter_server_process(config: dict) -> int:
    """This process's part of a parameter-server job (the launcher starts servers and trainers alike)."""
    from paddle_edo.distributed.ps import run_ps

    results = run_ps(config)
    if results and "test_auc" in results:
        print(f"parameter-server job: {results['examples_per_second']:.0f} examples/s on trainer 0, "
              f"loss {results['loss_first_epoch']:.4f} -> {results['loss_last_epoch']:.4f}")
        print(f"test auc {results['test_auc']:.4f}")
        print(f"test logloss {results['test_logloss']:.4f}")
        return learned_nothing(results)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
