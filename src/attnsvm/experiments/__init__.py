"""Registered experiments reproducing the papers, the sweep runner and the report.

``registry()`` lists them; ``run_experiment`` runs one (resumable, serial, local
processes or a Dask cluster); ``write_report`` summarizes a results folder.
"""

from .base import Check, Experiment, ExperimentConfig, Task, check, register, registry
from .config import build_config, parse_assignments, read_config_file
from .report import write_report
from .runner import RunSummary, run_experiment

__all__ = ["Check", "Experiment", "ExperimentConfig", "Task", "check", "register", "registry", "build_config",
           "parse_assignments", "read_config_file", "write_report", "RunSummary", "run_experiment"]
