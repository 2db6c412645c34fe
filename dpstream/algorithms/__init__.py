"""Transport-agnostic DP training algorithms (state machines run by ``dpstream.coordinator``)."""

from dpstream.algorithms.ambssgd import DPAMBSSGD, AMBSSGDPlan, dp_stat_threshold
from dpstream.algorithms.base import Plan, PrivacyReport, StepSpan
from dpstream.algorithms.dpsgd import DPSGD, DPSGDPlan
from dpstream.algorithms.srgd import AcceleratedDPSRGD, SRGDPlan
from dpstream.algorithms.ssp import AdaSSP, SSPPlan

__all__ = [
    "AdaSSP",
    "DPAMBSSGD",
    "DPSGD",
    "AcceleratedDPSRGD",
    "Plan",
    "AMBSSGDPlan",
    "DPSGDPlan",
    "SRGDPlan",
    "SSPPlan",
    "PrivacyReport",
    "StepSpan",
    "dp_stat_threshold",
]
