"""A parameter-server job's epoch checkpoints: the servers' tables, each trainer's own state (geo: its
copies of the tables; its admitted ids) and the job's settings, in a folder renamed over the last one;
and resuming from it."""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import paddle

from ..checkpoint import CheckpointError, checkpoint_difference, checkpoint_sections
from .admission import FeatureAdmission

logger = logging.getLogger("paddle_edo")


class PSCheckpoints:
    """Epoch checkpoints of one process of a PS job, in ``<train.output_dir>/ps_checkpoint``."""

    def __init__(self, config: dict[str, Any], fleet: Any, role: str, admission: FeatureAdmission | None) -> None:
        self.config, self.fleet, self.role, self.admission = config, fleet, role, admission
        self.geo = config["distributed"]["ps_mode"] == "geo"
        self.folder = Path(config["train"]["output_dir"]) / "ps_checkpoint"

    def save(self, exe, epochs_done: int, history: list[float]) -> None:
        """After an epoch: the servers' tables (sparse and dense, with optimizer state; every trainer calls the
        save, a barrier is inside), and each trainer's own state (geo: its copies of the tables and dense
        parameters with its optimizer state; its admitted ids), into a fresh folder renamed over the last one."""
        rank = self.fleet.worker_index()
        fresh = self.folder.with_name(self.folder.name + ".tmp")
        self.fleet.save_persistables(exe, str(fresh))
        fresh.mkdir(parents=True, exist_ok=True)
        if self.geo:
            np.savez(fresh / f"trainer{rank}.npz", **self.trainer_state())
        if self.admission is not None:
            self.admission.save(fresh / f"admission.trainer{rank}.npz")
        self.fleet.barrier_worker()  # every trainer's files are written
        if rank == 0:
            state = {"epoch": epochs_done, "history": history, "config": checkpoint_sections(self.config),
                     "job": self.job_settings()}
            (fresh / "state.json").write_text(json.dumps(state))
            old = self.folder.with_name(self.folder.name + ".old")
            if self.folder.exists():
                os.replace(self.folder, old)
            os.replace(fresh, self.folder)
            if old.exists():
                shutil.rmtree(old)
        self.fleet.barrier_worker()

    def job_settings(self) -> dict[str, Any]:
        """What a resumed job must share with the one that saved: its mode, trainers and admission rule."""
        distributed = self.config["distributed"]
        return {"ps_mode": distributed["ps_mode"], "trainers": self.fleet.worker_num(), "entry": distributed["entry"]}

    def to_resume(self) -> tuple[Path, dict[str, Any]] | None:
        """With train.resume: the last epoch checkpoint's folder and state, checked against this job."""
        if self.config["train"]["resume"] is False:
            return None
        folder = self.folder
        if not (folder / "state.json").is_file() and (folder.with_name(folder.name + ".old") / "state.json").is_file():
            folder = folder.with_name(folder.name + ".old")  # interrupted between the two renames
        if not (folder / "state.json").is_file():
            logger.info("%s: train.resume: no parameter-server checkpoint in %s yet; starting afresh", self.role,
                        self.folder)
            return None
        state = json.loads((folder / "state.json").read_text())
        diff = checkpoint_difference(state["config"], self.config)
        if diff is not None:
            raise CheckpointError(f"{folder} was made with another {diff.split('.')[0]} config ({diff}); resume "
                                  f"it with the config it was trained with")
        saved = {"ps_mode": "async", "trainers": self.fleet.worker_num(), "entry": "none", **state.get("job", {})}
        for key, now in self.job_settings().items():  # checkpoints from before "job" existed: async, no entry
            if saved[key] != now:
                name = "the number of trainers" if key == "trainers" else f"distributed.{key}"
                raise CheckpointError(f"{folder} was made by a job whose {name} was {saved[key]!r}, now {now!r}; "
                                      f"resume it with the same setting")
        return folder, state

    def resume(self, folder: Path, state: dict[str, Any], pull_dense) -> tuple[int, list[float]]:
        """Continue from an epoch checkpoint: async loads the servers' tables (geo trainers loaded their
        own state before init_worker); each trainer takes back its admitted ids. (first epoch, losses)"""
        if not self.geo:
            self.fleet.load_model(str(folder), mode=0)  # trainer 0 loads every table on the servers
            pull_dense()
        if self.admission is not None:
            self.admission.load(folder / f"admission.trainer{self.fleet.worker_index()}.npz")
        logger.info("%s: resumed from %s after epoch %d", self.role, folder, state["epoch"])
        return state["epoch"], list(state["history"])

    def trainer_state(self) -> dict[str, np.ndarray]:
        """This trainer's persistable variables: in geo mode its copies of the tables and the dense
        parameters, with its optimizer's accumulators."""
        scope, state = paddle.static.global_scope(), {}
        for var in paddle.static.default_main_program().list_vars():
            found = scope.find_var(var.name) if var.persistable else None
            if found is not None and var.type == paddle.base.core.VarDesc.VarType.LOD_TENSOR \
                    and found.get_tensor()._is_initialized():
                state[var.name] = np.array(found.get_tensor())
        return state

    def load_trainer_state(self, folder: Path) -> None:
        """Put this trainer's saved variables back into its scope. In geo mode init_worker then starts the
        servers from trainer 0's tables and dense parameters, and the other trainers take them from there,
        as at any geo start; each trainer keeps its own optimizer state."""
        scope = paddle.static.global_scope()
        with np.load(folder / f"trainer{self.fleet.worker_index()}.npz") as saved:
            for name in saved.files:
                scope.find_var(name).get_tensor().set(saved[name], paddle.CPUPlace())
