"""Privacy events: what a mechanism released, described without interpreting it.

Mechanism code builds events; accountants (``dpstream.privacy.accountant``) turn them into μ, ρ and
(ε, δ). This is the split ``dp_accounting`` makes between ``DpEvent`` and ``PrivacyAccountant``.

Every event is stated under one ``NeighbouringRelation``; the sensitivities it carries are already
the sensitivities *under that relation* (see ``NeighbouringRelation.clipped_sum_sensitivity``).

Events
------
``GaussianEvent``            one Gaussian release, L2 sensitivity Δ, noise std s: μ = Δ/s.
``MatrixMechanismEvent``     a stream released as C·G + Z (Choquette-Choo et al., arXiv:2310.06771,
                             App. A.1): every row of G has L2 sensitivity Δ, Z has i.i.d. N(0, s²)
                             entries, and a record touches one row (single participation).
                             μ = Δ · max_τ ‖C[:, τ]‖₂ / s.
``ComposedEvent``            sequential (adaptive) composition of events on the same records.
``SelfComposedEvent``        the same event k times.
``DisjointUnionEvent``       events on disjoint sets of records (a single pass): each record is in
                             one of them, so the guarantee is the worst one (parallel composition).
``PoissonSampledGaussianEvent``  Gaussian on a Poisson-subsampled batch, for comparisons with
                             Opacus-style accounting; never what a single pass releases.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dpstream.privacy.relation import NeighbouringRelation
from dpstream.validation import check_positive

__all__ = [
    "PrivacyEvent",
    "GaussianEvent",
    "MatrixMechanismEvent",
    "ComposedEvent",
    "SelfComposedEvent",
    "DisjointUnionEvent",
    "PoissonSampledGaussianEvent",
]


class PrivacyEvent:
    """Base class of all events. ``relation`` is the neighbouring relation the event is stated under."""

    relation: NeighbouringRelation

    def describe(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    sensitivity: float
    noise_std: float
    relation: NeighbouringRelation = NeighbouringRelation.REPLACE_ONE
    label: str = "gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "sensitivity", check_positive("sensitivity", self.sensitivity, allow_zero=True)
        )
        object.__setattr__(self, "noise_std", check_positive("noise_std", self.noise_std))
        object.__setattr__(self, "relation", NeighbouringRelation.parse(self.relation))

    @property
    def mu(self) -> float:
        return self.sensitivity / self.noise_std

    def describe(self) -> str:
        return f"{self.label}: Gaussian, sensitivity {self.sensitivity:.6g}, noise std {self.noise_std:.6g}"


@dataclass(frozen=True)
class MatrixMechanismEvent(PrivacyEvent):
    """Release of C·G + Z with single participation (each record in one row of G).

    ``max_column_norm`` is max_τ ‖C[:, τ]‖₂ over the steps actually released; ``row_sensitivity``
    the L2 sensitivity of one row of G under ``relation``; ``noise_std`` the std of Z's entries.
    """

    row_sensitivity: float
    noise_std: float
    max_column_norm: float
    num_steps: int
    relation: NeighbouringRelation = NeighbouringRelation.REPLACE_ONE
    label: str = "matrix mechanism"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "row_sensitivity", check_positive("row_sensitivity", self.row_sensitivity, allow_zero=True)
        )
        object.__setattr__(self, "noise_std", check_positive("noise_std", self.noise_std))
        object.__setattr__(self, "max_column_norm", check_positive("max_column_norm", self.max_column_norm))
        if int(self.num_steps) < 1:
            raise ValueError(f"num_steps must be >= 1, got {self.num_steps!r}")
        object.__setattr__(self, "num_steps", int(self.num_steps))
        object.__setattr__(self, "relation", NeighbouringRelation.parse(self.relation))

    @property
    def mu(self) -> float:
        return self.row_sensitivity * self.max_column_norm / self.noise_std

    @property
    def noise_multiplier(self) -> float:
        """Noise std per unit of row sensitivity divided by the encoder's column norm: 1/μ."""
        return self.noise_std / (self.row_sensitivity * self.max_column_norm)

    def describe(self) -> str:
        return (
            f"{self.label}: matrix mechanism over {self.num_steps} steps, row sensitivity "
            f"{self.row_sensitivity:.6g}, max column norm {self.max_column_norm:.6g}, noise std {self.noise_std:.6g}"
        )


def _common_relation(events: tuple[PrivacyEvent, ...]) -> NeighbouringRelation:
    if not events:
        raise ValueError("a composition needs at least one event")
    relations = {event.relation for event in events}
    if len(relations) != 1:
        names = ", ".join(sorted(str(r) for r in relations))
        raise ValueError(
            f"cannot compose events stated under different neighbouring relations ({names}); "
            "restate them under one relation"
        )
    return relations.pop()


@dataclass(frozen=True)
class _EventGroup(PrivacyEvent):
    """Events on the same relation, grouped; subclasses say how they combine."""

    events: tuple[PrivacyEvent, ...]
    relation: NeighbouringRelation = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", tuple(self.events))
        object.__setattr__(self, "relation", _common_relation(self.events))


@dataclass(frozen=True)
class ComposedEvent(_EventGroup):
    def describe(self) -> str:
        return "composition of [" + "; ".join(e.describe() for e in self.events) + "]"


@dataclass(frozen=True)
class SelfComposedEvent(PrivacyEvent):
    event: PrivacyEvent
    count: int
    relation: NeighbouringRelation = field(init=False)

    def __post_init__(self) -> None:
        if int(self.count) < 1:
            raise ValueError(f"count must be >= 1, got {self.count!r}")
        object.__setattr__(self, "count", int(self.count))
        object.__setattr__(self, "relation", self.event.relation)

    def describe(self) -> str:
        return f"{self.count} x ({self.event.describe()})"


@dataclass(frozen=True)
class DisjointUnionEvent(_EventGroup):
    def describe(self) -> str:
        return f"disjoint union of {len(self.events)} events (each record in one)"


@dataclass(frozen=True)
class PoissonSampledGaussianEvent(PrivacyEvent):
    """``count`` Gaussian steps on Poisson-sampled batches with rate ``sampling_rate``."""

    noise_multiplier: float
    sampling_rate: float
    count: int
    relation: NeighbouringRelation = NeighbouringRelation.REPLACE_ONE
    label: str = "poisson-sampled gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "noise_multiplier", check_positive("noise_multiplier", self.noise_multiplier)
        )
        rate = float(self.sampling_rate)
        if not (0.0 < rate <= 1.0):
            raise ValueError(f"sampling_rate must lie in (0, 1], got {self.sampling_rate!r}")
        if int(self.count) < 1:
            raise ValueError(f"count must be >= 1, got {self.count!r}")
        object.__setattr__(self, "count", int(self.count))
        object.__setattr__(self, "relation", NeighbouringRelation.parse(self.relation))

    def describe(self) -> str:
        return (
            f"{self.label}: {self.count} steps, sampling rate {self.sampling_rate:.6g}, "
            f"noise multiplier {self.noise_multiplier:.6g}"
        )
