"""Exact privacy accounting: Gaussian DP, events, accountants, calibration and the lake ledger."""

from __future__ import annotations

from dpstream.privacy.accountant import GdpAccountant, PldAccountant, UnsupportedEventError, event_mu
from dpstream.privacy.budget import BudgetError, PrivacyBudget, active_budget
from dpstream.privacy.calibrate import NoiseCalibration, calibrate_clipped_sum, calibrate_gaussian
from dpstream.privacy.events import (
    ComposedEvent,
    DisjointUnionEvent,
    GaussianEvent,
    MatrixMechanismEvent,
    PoissonSampledGaussianEvent,
    PrivacyEvent,
    SelfComposedEvent,
)
from dpstream.privacy.gdp import (
    compose_mu,
    delta_for_epsilon,
    epsilon_for_delta,
    mu_for_epsilon_delta,
    mu_from_rho,
    rho_from_mu,
    zcdp_epsilon,
    zcdp_epsilon_bun_steinke,
    zcdp_rho_for_epsilon,
)
from dpstream.privacy.ledger import (
    BudgetExceededError,
    LakeLedger,
    LedgerEntry,
    LifetimeBudget,
    RunIdReusedError,
    UnitMismatchError,
)
from dpstream.privacy.ledger_store import FsspecLedgerStore, LedgerStore
from dpstream.privacy.ledgers import Ledger
from dpstream.privacy.relation import NeighbouringRelation
from dpstream.privacy.unit import PrivacyUnit, group_mu

__all__ = [
    "NeighbouringRelation",
    "PrivacyUnit",
    "group_mu",
    "PrivacyEvent",
    "GaussianEvent",
    "MatrixMechanismEvent",
    "ComposedEvent",
    "SelfComposedEvent",
    "DisjointUnionEvent",
    "PoissonSampledGaussianEvent",
    "GdpAccountant",
    "PldAccountant",
    "UnsupportedEventError",
    "event_mu",
    "NoiseCalibration",
    "calibrate_gaussian",
    "calibrate_clipped_sum",
    "delta_for_epsilon",
    "epsilon_for_delta",
    "mu_for_epsilon_delta",
    "compose_mu",
    "rho_from_mu",
    "mu_from_rho",
    "zcdp_epsilon",
    "zcdp_epsilon_bun_steinke",
    "zcdp_rho_for_epsilon",
    "Ledger",
    "LedgerStore",
    "FsspecLedgerStore",
    "LakeLedger",
    "LedgerEntry",
    "LifetimeBudget",
    "BudgetExceededError",
    "RunIdReusedError",
    "UnitMismatchError",
    "PrivacyBudget",
    "BudgetError",
    "active_budget",
]
