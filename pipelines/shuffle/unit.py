"""How a user-level shuffle formed and bounded people: the manifest's ``unit`` record.

A later run reads it to know what the parts hold (at most k rows per person, people formed from the
id column by a recorded rule) and to refuse reusing a generation made with other settings: a change of
id column, k, the ``"auto"`` release's relation, or the rule that turns a stored id into a person
(``dpstream.person_ids``: a generation made before ids were normalised records none, read as
``as-stored``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dpstream.person_ids import AS_STORED
from dpstream.privacy.relation import NeighbouringRelation

__all__ = ["ShuffleUnit", "count"]


@dataclass(frozen=True)
class ShuffleUnit:
    """How a user-level shuffle bounded contributions (``dpstream.pipelines.shuffle.users``): the source's id
    column (a name, never its values), the k it applied and the k it was asked for (``"auto"``: chosen
    with DP at ``auto_mu``, charged to the lake's ledger as ``charge_id``), the relation of that release,
    the number of outputs the layout asked for (an output no person hashed to is not written), and the
    rule that formed people from the ids (``person_ids.id_rule``)."""

    user_column: str
    max_rows_per_user: int
    requested: int | str
    relation: str
    outputs: int
    auto_mu: float | None = None
    charge_id: str | None = None
    user_id_rule: str = AS_STORED

    def to_json(self) -> dict[str, Any]:
        return {
            "user_column": self.user_column,
            "max_rows_per_user": self.max_rows_per_user,
            "requested": self.requested,
            "relation": self.relation,
            "outputs": self.outputs,
            "auto_mu": self.auto_mu,
            "charge_id": self.charge_id,
            "user_id_rule": self.user_id_rule,
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ShuffleUnit:
        """``ValueError`` for a record that is not one (a missing column name, k < 1, an unknown relation,
        an auto μ that is not finite and positive, an id rule that is not a name)."""
        requested = document["requested"]
        if requested != "auto" and count(requested) < 1:
            raise ValueError(f"requested max_rows_per_user {requested!r} is below 1")
        if not isinstance(document["user_column"], str) or not document["user_column"]:
            raise ValueError(f"user_column {document['user_column']!r} is not a column name")
        if count(document["max_rows_per_user"]) < 1 or count(document["outputs"]) < 1:
            raise ValueError("max_rows_per_user and outputs must be at least 1")
        NeighbouringRelation.parse(document["relation"])
        auto_mu = document.get("auto_mu")
        if auto_mu is not None and not (
            isinstance(auto_mu, (int, float)) and math.isfinite(auto_mu) and auto_mu > 0
        ):
            raise ValueError(f"auto_mu {auto_mu!r} is not a finite positive number")
        rule = document.get("user_id_rule", AS_STORED)
        if not isinstance(rule, str) or not rule:
            raise ValueError(f"user_id_rule {rule!r} is not a rule name")
        return cls(
            user_column=str(document["user_column"]),
            max_rows_per_user=count(document["max_rows_per_user"]),
            requested=requested,
            relation=str(document["relation"]),
            outputs=count(document["outputs"]),
            auto_mu=None if auto_mu is None else float(auto_mu),
            charge_id=None if document.get("charge_id") is None else str(document["charge_id"]),
            user_id_rule=rule,
        )


def count(value: Any) -> int:
    """A non-negative int from JSON; a bool, float or string is refused."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r}")
    return value
