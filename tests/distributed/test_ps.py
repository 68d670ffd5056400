"""Real parameter-server jobs on localhost: 1 server and 2 trainers under paddle.distributed.launch."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from paddle_edo.compat import PARAMETER_SERVER_BUILDS, has_parameter_servers
from paddle_edo.config import load_config
from paddle_edo.data import CTRBatches, load_dataset
from paddle_edo.distributed.admission import FeatureAdmission
from paddle_edo.engine import Engine
from paddle_edo.schema import ConfigError

from conftest import ROOT, one_job_at_a_time

CONFIG = ROOT / "configs" / "ps_movielens.yaml"
needs_parameter_servers = pytest.mark.skipif(
    not has_parameter_servers(), reason=f"this Paddle has no parameter servers; they run on {PARAMETER_SERVER_BUILDS}")


@pytest.fixture(autouse=True)
def _one_job_at_a_time():
    with one_job_at_a_time():
        yield



def launch(out: Path, *overrides: str, log: str = "log", config: Path = CONFIG) -> subprocess.Popen:
    command = [sys.executable, "-m", "paddle.distributed.launch", "--server_num=1", "--trainer_num=2",
               "--log_dir", str(out / log), str(ROOT / "tools" / "train.py"), "-c", str(config),
               "-o", f"train.output_dir={out}", "-o", "distributed.init_timeout_s=60",
               *(x for o in overrides for x in ("-o", o))]
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finish(job: subprocess.Popen, timeout: float = 240) -> str:
    """Wait for a job and return its output; past ``timeout`` its processes are killed (none is left to
    compete with later tests) and the test fails."""
    try:
        return job.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        output = job.communicate()[0]
        pytest.fail(f"the job ran past {timeout} s: {output[-3000:]}")


def run_job(out: Path, *overrides: str, log: str = "log", config: Path = CONFIG) -> str:
    """Launch a job and wait for it; returns its output. A job that failed before training for reasons
    outside the toolkit's code is started once more: a server that found its port taken by another
    process (the launcher picks free ports, which a busy machine can hand out again), or a trainer stalled
    in Paddle's start-up barriers (seen once in about 30 geo jobs)."""
    for attempt in range(2):
        job = launch(out, *overrides, log=log, config=config)
        output = finish(job)
        if job.returncode == 0 or attempt or not failed_to_start(out, log):
            break
    assert job.returncode == 0, output[-3000:] + logs(out, log)[-3000:]
    return output


def failed_to_start(out: Path, log: str = "log") -> bool:
    """Whether the job failed before training for the machine's reasons (see run_job); if so, its logs
    are removed for the job to start again."""
    text = logs(out, log)
    if "cannot listen on" not in text and "did not return within distributed.init_timeout_s" not in text:
        return False
    shutil.rmtree(out / log)
    return True


def logs(out: Path, log: str = "log") -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((out / log).glob("*log.*")))


def epoch_losses(text: str, trainer: int) -> list[float]:
    return [float(line.split()[-1]) for line in text.splitlines() if f"trainer {trainer}: epoch" in line]


def window_losses(text: str, trainer: int) -> list[float]:
    """The mean losses a trainer logged every train.log_every_steps steps."""
    return [float(line.split("loss")[1].split()[0]) for line in text.splitlines() if f"trainer {trainer}: step" in line]


def check_trainer_monitoring(logdir: Path, config: dict, engine: Engine, trainers: int = 2) -> None:
    """Each trainer logged its own VisualDL run: rows touched and coverage equal what its share of the
    data holds, gradient norms are there."""
    from visualdl import LogReader

    splits, train = engine.splits, config["train"]
    first, second = (f.name for f in engine.fields[:2])
    padding = engine.model.embeddings[first].padding_idx
    every = config["monitor"]["every_n_steps"]
    for rank in range(trainers):
        (path,) = (logdir / f"trainer{rank}").glob("vdlrecords*")
        reader = LogReader(file_path=str(path))
        tags = {"rows_touched": f"sparse/embeddings.{first}/rows_touched",
                "coverage_pct": f"sparse/embeddings.{first}/coverage_pct",
                "grad_norm_max": f"sparse/embeddings.{second}/grad_norm_max"}
        series = {key: {r.id: r.value for r in reader.get_data("scalar", tag)} for key, tag in tags.items()}
        mine = splits.train.take(np.arange(rank, len(splits.train), trainers))
        batches = CTRBatches(mine, train["batch_size"], shuffle=True, seed=train["seed"] + rank)
        batches.epoch = 0
        batch = list(batches)[every - 1]
        assert series["rows_touched"][every] == len(set(batch[first].tolist()) - {padding})
        ids = set(mine.ids[first].tolist()) - {padding}
        last = max(series["coverage_pct"])
        assert series["coverage_pct"][last] == pytest.approx(
            100.0 * len(ids) / (engine.fields[0].vocab_size - (padding is not None)))
        norms = series["grad_norm_max"]
        assert norms and all(np.isfinite(v) for v in norms.values())
        # rows no push has created yet read as zeros (see distributed/ps.py), so gradients can be exactly
        # zero until the first dense pull, which flushes the trainer's pushes; after it they are not
        pulled = config["distributed"]["pull_dense_every"]
        dead = {step: v for step, v in norms.items() if step > pulled and v <= 0}
        assert not dead, f"trainer {rank}: grad_norm_max at steps {dead}"


DATA = {"movielens": ["data.name=movielens"],
        "synthetic": ["data.name=synthetic", "data.synthetic.num_samples=100000"]}  # half the default: time
_single_runs: dict[str, tuple[dict, Engine, dict]] = {}


def single_process_run(data: str, tmp_path_factory) -> tuple[dict, Engine, dict]:
    """(config, engine, results) of the config trained in one process; the async and geo jobs share it."""
    if data not in _single_runs:
        config = load_config(CONFIG, [f"train.output_dir={tmp_path_factory.mktemp('single')}",
                                      "distributed.mode=none", *DATA[data]])
        engine = Engine(config)
        _single_runs[data] = (config, engine, engine.fit())
    return _single_runs[data]


@needs_parameter_servers
@pytest.mark.parametrize("ps_mode, data", [("async", "movielens"), ("geo", "movielens"), ("async", "synthetic")])
def test_a_ps_job_trains_like_one_process_and_ends_cleanly(tmp_path, tmp_path_factory, ps_mode, data):
    run_job(tmp_path / "ps", f"distributed.ps_mode={ps_mode}", *DATA[data], "monitor.enable=true")
    results = json.loads((tmp_path / "ps" / "results.json").read_text())
    config, engine, single = single_process_run(data, tmp_path_factory)
    # no worse than one process by more than 0.01 (on the synthetic data the servers' Adam rule at the
    # config's sparse rate does better than one process: 0.776-0.778 against 0.769)
    assert results["test_auc"] > single["test_auc"] - 0.01
    if data == "movielens":
        assert abs(results["test_auc"] - single["test_auc"]) < 0.01
    check_trainer_monitoring(tmp_path / "ps" / "vdl", config, engine)
    text = logs(tmp_path / "ps")
    for trainer in (0, 1):  # both trainers learned
        first, last = epoch_losses(text, trainer)
        assert last < first
    # the tables pulled from the servers and the dense parameters rebuild the served model exactly
    config = load_config(CONFIG, [f"train.output_dir={tmp_path / 'ps'}", *DATA[data]])
    engine = Engine(config)
    engine.load_for_serving(engine.checkpoint_path)
    assert engine.evaluate("test")["auc"] == pytest.approx(results["test_auc"], abs=1e-6)


@needs_parameter_servers
def test_the_criteo_configs_own_settings_learn_on_parameter_servers(tmp_path):
    """configs/criteo.yaml's 4096-row batches with the default pull of the dense parameters (every step):
    at every 10 steps the trainers trained on stale copies and the job ended at chance (0.4808 on these
    rows, now an error); at every step it learns (0.6184 measured in 20 steps a trainer)."""
    data = tmp_path / "criteo"
    subprocess.run([sys.executable, str(ROOT / "tools" / "get_data.py"), "criteo-synthetic", "--rows", "200000",
                    "--out", str(data)], check=True, capture_output=True)
    run_job(tmp_path / "ps", "distributed.mode=ps", f"data.files.path={data}", config=ROOT / "configs" / "criteo.yaml")
    results = json.loads((tmp_path / "ps" / "results.json").read_text())
    assert results["test_auc"] > max(0.56, results["test_auc_chance"])


@pytest.mark.parametrize("compression", [["embedding.type=hash", "embedding.bucket_fraction=0.25"],
                                         ["embedding.type=qr", "embedding.num_collisions=8"]])
@needs_parameter_servers
def test_id_compression_maps_ids_before_the_servers_tables(tmp_path, compression):
    run_job(tmp_path, *compression)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["test_auc"] > 0.7
    engine = Engine(load_config(CONFIG, [f"train.output_dir={tmp_path}", *compression]))
    engine.load_for_serving(engine.checkpoint_path)  # the compressed layers with their tables from the servers
    assert engine.evaluate("test")["auc"] == pytest.approx(results["test_auc"], abs=1e-6)
    assert engine.memory_report().tables[0].held_bytes < 944 * 8 * 4  # user ids, served by fewer rows


def show_click_score(ids, labels, size):  # Paddle's default coefficients: 0.1 a show without a click, 1 a click
    clicks = np.bincount(ids, weights=labels, minlength=size)
    return 0.1 * (np.bincount(ids, minlength=size) - clicks) + clicks


@needs_parameter_servers
def test_feature_admission_runs_on_the_trainers_and_serves_unadmitted_ids_as_unknown(tmp_path):
    # show_click here; count_filter and probability in the resume tests (jobs stopped after one epoch)
    admission = ["distributed.entry=show_click", "distributed.show_click_threshold=12.05"]
    run_job(tmp_path, *admission)
    config = load_config(CONFIG, [f"train.output_dir={tmp_path}", *admission])
    engine = Engine(config)
    train, field = engine.splits.train, engine.fields[0]
    assert field.name == "user_id" and not field.multi_valued
    served = np.zeros(field.vocab_size, dtype=bool)
    for rank in (0, 1):  # each trainer admitted the users whose score over its epochs reached the threshold
        mine = train.ids["user_id"][rank::2]
        admitted = show_click_score(mine, train.labels[rank::2], field.vocab_size) * config["train"]["epochs"] >= 12.05
        admitted[0] = False
        results = json.loads((tmp_path / f"results.trainer{rank}.json").read_text())
        assert results["admitted_ids"]["user_id"] == admitted.sum()
        served |= admitted
    never = np.flatnonzero(~served)[1:]
    assert 0 < never.size < field.vocab_size - 1
    engine.load_for_serving(engine.checkpoint_path)
    weight = engine.model.embeddings["user_id"].weight.numpy()
    np.testing.assert_array_equal(weight[never], np.broadcast_to(weight[0], (never.size, weight.shape[1])))
    results = json.loads((tmp_path / "results.json").read_text())
    assert engine.evaluate("test")["auc"] == pytest.approx(results["test_auc"], abs=1e-6)


def replayed_admission(config: dict, rank: int, trainers: int = 2) -> dict[str, int]:
    """The ids trainer ``rank`` admits over the config's epochs, replayed on its share of the batches."""
    train, splits = config["train"], load_dataset(config["data"])
    admission = FeatureAdmission.from_config(config, {f.name: f.vocab_size for f in splits.fields
                                                      if not f.multi_valued}, rank)
    batches = CTRBatches(splits.train.take(np.arange(rank, len(splits.train), trainers)), train["batch_size"],
                         shuffle=True, seed=train["seed"] + rank)
    for batches.epoch in range(train["epochs"]):
        for batch in batches:
            for field in admission.admitted:
                admission(field, np.asarray(batch[field]), np.asarray(batch["label"], dtype=np.float64))
    return admission.counts()


@pytest.mark.parametrize("job", [["distributed.entry=count_filter", "distributed.count_filter=30"],
                                 ["distributed.ps_mode=geo", "distributed.entry=probability"]])
@needs_parameter_servers
def test_a_ps_job_resumes_from_its_epoch_checkpoint(tmp_path, job):
    run_job(tmp_path, *job, "train.epochs=1", log="log1")
    assert json.loads((tmp_path / "ps_checkpoint" / "state.json").read_text())["epoch"] == 1
    run_job(tmp_path, *job, "train.epochs=2", "train.resume=true", log="log2")
    text = logs(tmp_path, "log2")
    assert f"resumed from {tmp_path / 'ps_checkpoint'} after epoch 1" in text
    assert "epoch 1/2" not in text
    for trainer in (0, 1):  # went on from the saved tables: the first 50 steps already score as trained ones
        fresh_start, resumed_start = (window_losses(t, trainer)[0] for t in (logs(tmp_path, "log1"), text))
        assert resumed_start < fresh_start - 0.03
    for rank in (0, 1) if "distributed.ps_mode=geo" in job else ():  # a geo trainer's own state (its tables,
        with np.load(tmp_path / "ps_checkpoint" / f"trainer{rank}.npz") as saved:  # dense parameters and Adam
            assert all(np.isfinite(saved[name]).all() for name in saved.files)  # moments) stays finite
    assert json.loads((tmp_path / "ps_checkpoint" / "state.json").read_text())["epoch"] == 2
    config = load_config(CONFIG, [f"train.output_dir={tmp_path}", *job, "train.epochs=2"])
    for rank in (0, 1):  # admission went on from each trainer's saved counts (and generator), as without a stop
        results = json.loads((tmp_path / f"results.trainer{rank}.json").read_text())
        assert results["admitted_ids"] == replayed_admission(config, rank)
    engine = Engine(config)  # the checkpoint trainer 0 wrote serves its score
    engine.load_for_serving(engine.checkpoint_path)
    assert engine.evaluate("test")["auc"] == pytest.approx(
        json.loads((tmp_path / "results.json").read_text())["test_auc"], abs=1e-6)
    if "distributed.ps_mode=geo" in job:  # a job of another mode cannot go on from it
        refused = launch(tmp_path, "distributed.entry=probability", "train.epochs=3", "train.resume=true", log="log3")
        finish(refused, timeout=120)
        assert refused.returncode != 0
        assert "whose distributed.ps_mode was 'geo', now 'async'; resume it with the same setting" in logs(tmp_path,
                                                                                                             "log3")


@needs_parameter_servers
def test_a_job_past_its_timeout_fails_and_says_which_processes_and_where_their_logs_are(tmp_path):
    # bounded by what it checks, not by this machine's speed today: the launcher reports that the job ran
    # past its timeout (how long its processes took to start under load is not the point)
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "launch.py"), "-c", str(CONFIG),
                             "-o", f"train.output_dir={tmp_path}", "-o", "distributed.timeout_s=10",
                             "-o", "train.epochs=200"], cwd=ROOT, capture_output=True, text=True, timeout=150,
                            env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 1
    assert "error: the ps job failed" in result.stderr
    reasons = [line for line in result.stderr.splitlines() if line.startswith("  did not finish: ")]
    assert any(f"({tmp_path / 'log'}/" in line and "passed distributed.timeout_s = 10 s" in line for line in reasons)


def launched_process(out: Path, markers: tuple[bytes, ...]) -> int | None:
    """The pid of the process the launcher started with these environment markers, found by its command
    line. Its own forks match too (the server's checkpoint writers run `bash -c ... gzip` children), so
    the one whose parent does not match is it."""
    matching = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if str(out).encode() in cmdline and all(marker in environ for marker in markers):
            matching[int(pid)] = parent
    roots = [pid for pid, parent in matching.items() if parent not in matching]
    return roots[0] if len(roots) == 1 else None


@pytest.mark.parametrize("role, markers, log", [
    ("trainer 1", (b"TRAINING_ROLE=TRAINER", b"PADDLE_TRAINER_ID=1"), "workerlog.1"),
    ("server 0", (b"TRAINING_ROLE=PSERVER",), "serverlog.0")])
@needs_parameter_servers
def test_a_killed_process_fails_the_job_and_leaves_the_last_checkpoint_intact(tmp_path, role, markers, log):
    for attempt in range(2):  # once more if the job failed to start (see run_job)
        job = launch(tmp_path, "train.epochs=200", "distributed.timeout_s=45")
        victim = None
        deadline = time.monotonic() + 90
        while victim is None and time.monotonic() < deadline and job.poll() is None:
            time.sleep(1)
            victim = launched_process(tmp_path, markers)
        if victim is not None or attempt or job.poll() is None or not failed_to_start(tmp_path):
            break
    assert victim is not None
    while not (tmp_path / "ps_checkpoint" / "state.json").exists() and time.monotonic() < deadline + 60:
        time.sleep(0.5)  # mid-run, after at least one epoch checkpoint
    os.kill(victim, signal.SIGKILL)
    start = time.monotonic()
    finish(job, timeout=150)
    assert job.returncode != 0 and time.monotonic() - start < 110  # within distributed.timeout_s (+ teardown)
    from tools.launch import unfinished

    failed = unfinished(tmp_path / "log")
    assert any(line.startswith(f"{role} ({tmp_path / 'log' / log})") for line in failed), failed
    state = json.loads((tmp_path / "ps_checkpoint" / "state.json").read_text())  # whole: written, then renamed
    assert state["epoch"] >= 1 and len(state["history"]) == state["epoch"]


@needs_parameter_servers
def test_sync_mode_and_missing_launcher_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="ps_mode = 'sync' is refused: .* segfaults in SendBarrierOp"):
        load_config(CONFIG, ["distributed.ps_mode=sync"])
    with pytest.raises(ConfigError, match="optimizer = 'momentum' has no parameter-server rule"):
        load_config(CONFIG, ["train.optimizer=momentum"])
    with pytest.raises(ConfigError, match="embedding.type = 'quantized' cannot be used with distributed.mode = 'ps'"):
        load_config(CONFIG, ["embedding.type=quantized"])
    with pytest.raises(ConfigError, match="distributed.entry = 'count_filter' needs embedding.type = 'dense'"):
        load_config(CONFIG, ["distributed.entry=count_filter", "embedding.type=hash"])
    from paddle_edo.distributed.ps import run_ps

    config = load_config(CONFIG, [f"train.output_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="runs under the launcher: python -m paddle.distributed.launch"):
        run_ps(config)


def test_a_server_refuses_a_port_another_process_holds():
    from paddle_edo.distributed.processes import ServerStartError, check_listenable

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        endpoint = f"127.0.0.1:{holder.getsockname()[1]}"
        refused = f"server 0: cannot listen on {endpoint} \\(Address already in use\\)"
        with pytest.raises(ServerStartError, match=refused):
            check_listenable(endpoint, "server 0")
    check_listenable(endpoint, "server 0")  # free again


def test_a_process_past_its_bound_says_why_and_fails_unless_the_bound_was_cancelled():
    # the stall holds the GIL (a regular expression that backtracks for hours), as Paddle's C++ barriers do
    script = ("import re; from paddle_edo.distributed.processes import exit_after; "
              "exit_after(1, 'trainer 0: joined').cancel(); "
              "exit_after(1, 'trainer 0: fleet.init_worker() did not return'); re.match('(a|aa)*c', 'a' * 60)")
    stalled = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert stalled.returncode == -signal.SIGKILL  # the cancelled bound said nothing; the other ended the process
    assert stalled.stdout == "paddle_edo: trainer 0: fleet.init_worker() did not return; exiting\n"


def test_a_bound_ends_within_a_second_of_its_process():
    script = ("from paddle_edo.distributed.processes import exit_after; "
              "print(exit_after(600, 'trainer 0: passed its bound').process.pid, flush=True)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    watchdog = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 3
    while Path(f"/proc/{watchdog}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    status = Path(f"/proc/{watchdog}/stat").read_text().split()[2] if Path(f"/proc/{watchdog}").exists() else "gone"
    assert status in ("gone", "Z")  # ended (a zombie waits only for its reaper)


@pytest.mark.skipif(has_parameter_servers(), reason="this Paddle has parameter servers")
def test_without_parameter_servers_a_ps_job_stops_at_start_naming_the_builds_that_have_them(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "train.py"), "-c", str(CONFIG), "-o",
                             f"train.output_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "needs a Paddle build with parameter-server support" in result.stderr
    assert PARAMETER_SERVER_BUILDS in result.stderr
