"""Transport-agnostic DP training algorithms (state machines run by ``dpstream.coordinator``)."""

from dpstream.algorithms.ambssgd import DPAMBSSGD, dp_stat_threshold
from dpstream.algorithms.base import Plan, PrivacyReport, StepSpan
from dpstream.algorithms.dpsgd import DPSGD
from dpstream.algorithms.srgd import AcceleratedDPSRGD
from dpstream.algorithms.ssp import AdaSSP

__all__ = ["AdaSSP", "DPAMBSSGD", "DPSGD", "AcceleratedDPSRGD", "Plan", "PrivacyReport", "StepSpan", "dp_stat_threshold"]
