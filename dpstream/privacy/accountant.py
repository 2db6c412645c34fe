"""Accountants: interpret privacy events as μ-GDP, ρ-zCDP and (ε, δ)-DP.

``GdpAccountant`` is exact. It handles every event built from Gaussian mechanisms without sampling:
Gaussian releases, matrix mechanisms with single participation, sequential and self composition,
and disjoint unions (a single pass). μ composes as sqrt(Σ μ²) (Dong, Roth & Su 2022, Cor. 3.3) and a
disjoint union is as private as its least private part (parallel composition: a record is in one).

``PldAccountant`` delegates to ``dp_accounting``'s privacy-loss-distribution accountant for what GDP
cannot state exactly, such as Poisson-subsampled Gaussians reported for comparison with Opacus. PLD
results are numerical upper bounds (pessimistic discretisation), not closed forms.

Both follow dp_accounting's protocol: ``compose(event)`` then ``get_epsilon(delta)`` / ``get_delta``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from dpstream.privacy import gdp
from dpstream.privacy.events import (
    ComposedEvent,
    DisjointUnionEvent,
    GaussianEvent,
    MatrixMechanismEvent,
    PoissonSampledGaussianEvent,
    PrivacyEvent,
    SelfComposedEvent,
)
from dpstream.privacy.relation import NeighbouringRelation

__all__ = ["UnsupportedEventError", "event_mu", "GdpAccountant", "PldAccountant"]


class UnsupportedEventError(ValueError):
    """Raised when an accountant cannot interpret an event exactly."""


def event_mu(event: PrivacyEvent) -> float:
    """The exact μ of an event made of unsampled Gaussian mechanisms (μ-GDP)."""
    if isinstance(event, (GaussianEvent, MatrixMechanismEvent)):
        return event.mu
    if isinstance(event, ComposedEvent):
        return gdp.compose_mu(*(event_mu(e) for e in event.events))
    if isinstance(event, SelfComposedEvent):
        return math.sqrt(event.count) * event_mu(event.event)
    if isinstance(event, DisjointUnionEvent):
        return max(event_mu(e) for e in event.events)
    raise UnsupportedEventError(
        f"{type(event).__name__} has no exact GDP interpretation; use PldAccountant for it"
    )


class GdpAccountant:
    """Exact μ-GDP accountant under one neighbouring relation."""

    def __init__(self, relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE):
        self.relation = NeighbouringRelation.parse(relation)
        self._mus: list[float] = []
        self._events: list[PrivacyEvent] = []

    def supports(self, event: PrivacyEvent) -> bool:
        try:
            event_mu(event)
        except UnsupportedEventError:
            return False
        return event.relation is self.relation

    def compose(self, event: PrivacyEvent, count: int = 1) -> GdpAccountant:
        if event.relation is not self.relation:
            raise ValueError(
                f"event is stated under {event.relation} but this accountant under {self.relation}"
            )
        mu = event_mu(event if count == 1 else SelfComposedEvent(event, count))
        self._mus.append(mu)
        self._events.append(event)
        return self

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return tuple(self._events)

    @property
    def mu(self) -> float:
        return gdp.compose_mu(*self._mus) if self._mus else 0.0

    @property
    def rho(self) -> float:
        """ρ-zCDP of the composed Gaussian mechanisms (ρ = μ²/2)."""
        return gdp.rho_from_mu(self.mu)

    def get_epsilon(self, delta: float) -> float:
        return gdp.epsilon_for_delta(delta, self.mu)

    def get_delta(self, epsilon: float) -> float:
        return gdp.delta_for_epsilon(epsilon, self.mu)


def _to_dp_accounting(event: PrivacyEvent, relation: NeighbouringRelation):
    import dp_accounting

    # dp_accounting's Gaussian has sensitivity 1 under add/remove or "replace special" and 2 under
    # replace-one; our events carry sensitivities already stated under the relation, so an exact
    # μ-GDP part becomes a Gaussian whose noise multiplier gives that same μ.
    doubling = 2.0 if relation is NeighbouringRelation.REPLACE_ONE else 1.0
    if isinstance(event, (GaussianEvent, MatrixMechanismEvent, DisjointUnionEvent)):
        mu = event_mu(event)
        if mu == 0.0:
            return dp_accounting.NoOpDpEvent()
        return dp_accounting.GaussianDpEvent(noise_multiplier=doubling / mu)
    if isinstance(event, ComposedEvent):
        return dp_accounting.ComposedDpEvent([_to_dp_accounting(e, relation) for e in event.events])
    if isinstance(event, SelfComposedEvent):
        return dp_accounting.SelfComposedDpEvent(_to_dp_accounting(event.event, relation), event.count)
    if isinstance(event, PoissonSampledGaussianEvent):
        inner = dp_accounting.GaussianDpEvent(noise_multiplier=event.noise_multiplier)
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(event.sampling_rate, inner), event.count
        )
    raise UnsupportedEventError(f"PldAccountant cannot interpret {type(event).__name__}")


class PldAccountant:
    """Numerical accountant backed by ``dp_accounting.pld.PLDAccountant``."""

    def __init__(
        self,
        relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE,
        value_discretization_interval: float = 1e-4,
    ):
        import dp_accounting
        from dp_accounting.pld import pld_privacy_accountant

        self.relation = NeighbouringRelation.parse(relation)
        library_relation = (
            dp_accounting.NeighboringRelation.REPLACE_ONE
            if self.relation is NeighbouringRelation.REPLACE_ONE
            else dp_accounting.NeighboringRelation.REPLACE_SPECIAL
        )
        self._accountant = pld_privacy_accountant.PLDAccountant(
            library_relation, value_discretization_interval=value_discretization_interval
        )

    def compose(self, event: PrivacyEvent, count: int = 1) -> PldAccountant:
        if event.relation is not self.relation:
            raise ValueError(
                f"event is stated under {event.relation} but this accountant under {self.relation}"
            )
        self._accountant.compose(_to_dp_accounting(event, self.relation), count)
        return self

    def compose_all(self, events: Iterable[PrivacyEvent]) -> PldAccountant:
        for event in events:
            self.compose(event)
        return self

    def get_epsilon(self, delta: float) -> float:
        return float(self._accountant.get_epsilon(delta))

    def get_delta(self, epsilon: float) -> float:
        return float(self._accountant.get_delta(epsilon))
