"""Launch a distributed experiment with paddle.distributed.launch, bounded by a timeout, logs under the
run's output folder, and on failure a message naming each process that did not finish and its log:

  python tools/launch.py -c configs/ps_movielens.yaml [-o key=value ...] [--server_num 1 --trainer_num 2]
  python tools/launch.py -c configs/X.yaml --nproc_per_node 2          # collective (DataParallel), sharded
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools._cli import experiment_parser, fail_cleanly  # noqa: E402


def unfinished(log_dir: Path) -> list[str]:
    """'trainer 1 (<log>): <last line>' for every process log without the normal end line."""
    from paddle_edo.distributed.processes import FINISHED

    found = []
    for log in sorted(log_dir.glob("*log.*")):
        if not log.name.startswith(("serverlog.", "workerlog.")):
            continue
        lines = [l for l in log.read_text(errors="replace").splitlines() if l.strip()]
        if not any(l.startswith(FINISHED) for l in lines):
            role = "server" if log.name.startswith("server") else "trainer"
            found.append(f"{role} {log.suffix[1:]} ({log}): {lines[-1][:200] if lines else 'no output'}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__)
    parser.add_argument("--server_num", type=int, default=1)
    parser.add_argument("--trainer_num", type=int, default=2)
    parser.add_argument("--nproc_per_node", type=int, default=None, help="collective and sharded modes: processes")
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        from paddle_edo import load_config

        config = load_config(args.config, args.override)
        mode = config["distributed"]["mode"]
        if mode == "none":
            from paddle_edo.schema import ConfigError

            raise ConfigError(f"{args.config}: distributed.mode = 'none'; tools/launch.py runs 'ps', "
                              f"'collective' or 'sharded' experiments (use tools/train.py for one process)")
        log_dir = Path(config["train"]["output_dir"]) / "log"
        processes = (["--nproc_per_node", str(args.nproc_per_node or 2)] if mode in ("collective", "sharded") else
                     ["--server_num", str(args.server_num), "--trainer_num", str(args.trainer_num)])
        command = [sys.executable, "-m", "paddle.distributed.launch", *processes, "--log_dir", str(log_dir),
                   str(ROOT / "tools" / "train.py"), "-c", args.config, *(x for o in args.override for x in ("-o", o))]
        timeout = config["distributed"]["timeout_s"] + 60
        job = subprocess.Popen(command, start_new_session=True)
        try:
            code = job.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            code = 124
        if code != 0:
            print(f"error: the {mode} job failed (launcher status {code})", file=sys.stderr)
            for line in unfinished(log_dir) or [f"see the logs in {log_dir}"]:
                print(f"  did not finish: {line}", file=sys.stderr)
            return 1
        print(f"logs in {log_dir}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
