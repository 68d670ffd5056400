"""What the command-line tools share: one-line errors and the results table."""
from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from typing import Any, Iterator

# `import paddle` 3.x warns that ccache is missing (its extension builder's concern, not a user's)
warnings.filterwarnings("ignore", message="No ccache found")


def experiment_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments every experiment tool takes: -c CONFIG and repeatable -o key.path=value."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", required=True, help="experiment YAML")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. -o train.epochs=1 (repeatable)")
    add_debug_flag(parser)
    return parser


def trained_experiment_parser(doc: str | None) -> argparse.ArgumentParser:
    """experiment_parser with --checkpoint: the tools that load a trained run."""
    parser = experiment_parser(doc)
    parser.add_argument("--checkpoint", help="default: <train.output_dir>/checkpoints/last.pdckpt")
    return parser


def trained_engine(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """(config, engine) of a trained run: its checkpoint loaded and packed for serving."""
    from paddle_edo import load_config
    from paddle_edo.engine import Engine

    config = load_config(args.config, args.override)
    engine = Engine(config)
    engine.load_for_serving(args.checkpoint or engine.checkpoint_path)
    return config, engine


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="show the traceback of paddle_edo's errors too")


def log_to_console() -> None:
    """paddle_edo's log lines on stdout, once (libraries that configure the root logger don't double them)."""
    import logging

    log = logging.getLogger("paddle_edo")
    if not any(getattr(h, "paddle_edo_console", False) for h in log.handlers):
        console = logging.StreamHandler(sys.stdout)
        console.setFormatter(logging.Formatter("%(message)s"))
        console.paddle_edo_console = True
        log.addHandler(console)
        log.setLevel(logging.INFO)
        log.propagate = False


@contextlib.contextmanager
def fail_cleanly(debug: bool = False) -> Iterator[None]:
    """Turn every error paddle_edo raises on purpose (``EdoError``) into one line on stderr and exit
    status 2 (a diverged run: status 1); with ``debug`` the traceback is shown too. Anything else is a
    bug and keeps its traceback. Logs to the console."""
    log_to_console()
    from paddle_edo.errors import DivergedError, EdoError

    try:
        yield
    except EdoError as exc:
        if debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1 if isinstance(exc, DivergedError) else 2)  # diverged: not an input error, the run failed


def learned_nothing(results: dict[str, float]) -> int:
    """1, with an error line on stderr, for a run whose test AUC is no better than chance (as a diverged
    run's tools fail); else 0."""
    if results["test_auc"] >= results["test_auc_chance"]:
        return 0
    print(f"error: test AUC {results['test_auc']:.4f} is no better than chance (scores that know nothing stay "
          f"under {results['test_auc_chance']:.4f} on this test split): the run learned nothing; lower "
          f"train.learning_rate (distributed.sparse_learning_rate for parameter servers) or check the labels",
          file=sys.stderr, flush=True)
    return 1


def results_table(config: dict[str, Any], results: dict[str, float], report: Any,
                  caches: dict[str, dict[str, float]] | None = None) -> str:
    from paddle_edo.memory import format_bytes

    rows = [("experiment", f"{config['data']['name']} / {config['model']['name']} / "
                           f"embedding {config['embedding']['type']} dim {config['embedding']['dim']}"),
            ("test AUC", f"{results['test_auc']:.4f}"),
            ("test logloss", f"{results['test_logloss']:.4f}"),
            ("test accuracy", f"{results['test_accuracy']:.4f}")]
    rows += [(f"test {key[len('test_'):-len('_rmse')]} RMSE", f"{value:.4f}") for key, value in sorted(results.items())
             if key.startswith("test_") and key.endswith("_rmse")]
    for subset in sorted({k[: -len("_rows")] for k in results if k.endswith("_rows")}):
        rows.append((f"{subset} ({results[subset + '_rows']} rows)",
                     f"accuracy {results[subset + '_accuracy']:.4f}, AUC {results[subset + '_auc']:.4f}"))
    rows.append(("train time", f"{results['train_seconds']:.1f} s"))
    for table in report.tables:
        state = (f"; optimizer state {format_bytes(table.optimizer_estimated_bytes)} estimated, "
                 f"{format_bytes(table.optimizer_held_bytes)} held ({table.optimizer})" if table.optimizer else "")
        gradients = (f"; row gradients {format_bytes(table.gradient_estimated_bytes)} at most, "
                     f"{format_bytes(table.gradient_held_bytes)} at their peak" if table.gradient_estimated_bytes else "")
        rows.append((f"memory {table.name}", f"{format_bytes(table.estimated_bytes)} estimated, "
                                             f"{format_bytes(table.held_bytes)} held ({table.dtype}){state}{gradients}"))
    rows.append(("memory total", f"{format_bytes(report.estimated_bytes)} estimated, "
                                 f"{format_bytes(report.held_bytes)} held"
                                 + (f", {format_bytes(report.host_bytes)} on the host" if report.host_bytes else "")
                                 + (f"; optimizer state {format_bytes(report.optimizer_estimated_bytes)} estimated, "
                                    f"{format_bytes(report.optimizer_held_bytes)} held"
                                    if any(t.optimizer for t in report.tables) else "")
                                 + (f"; row gradients {format_bytes(report.gradient_estimated_bytes)} at most, "
                                    f"{format_bytes(report.gradient_held_bytes)} at their peak"
                                    if report.gradient_estimated_bytes else "")))
    for name, c in (caches or {}).items():
        rows.append((f"cache {name}", f"hit rate {c['hit_rate']:.3f}: {int(c['hits'])} hits, {int(c['misses'])} "
                                      f"misses, {int(c['evictions'])} evictions, {format_bytes(int(c['bytes_to_device']))}"
                                      f" to device, {format_bytes(int(c['bytes_to_host']))} to host, "
                                      f"{int(c['bypass_rows'])} rows served from the host"))
    rows += [(f"note {table.name}", table.note) for table in report.tables if table.note]
    width = max(len(k) for k, _ in rows)
    line = "=" * (width + 2 + max(len(v) for _, v in rows))
    return "\n".join([line, *(f"{k.ljust(width)}  {v}" for k, v in rows), line])
