"""The papers' experiments: configs, tasks, checks and figures, grouped by paper.

``registry()`` discovers them (subpackages ``tf``, ``mm``, ``lm``, ``real``); running them,
resumably and in parallel, is :mod:`attnsvm.runner`; summarizing a results folder is
:mod:`attnsvm.report`.
"""

from attnsvm.experiments.base import Check, Experiment, ExperimentConfig, Task, check, register, registry
from attnsvm.experiments.config import build_config, parse_assignments, read_config_file

__all__ = ["Check", "Experiment", "ExperimentConfig", "Task", "check", "register", "registry", "build_config",
           "parse_assignments", "read_config_file"]
