"""A typed, code-free encoding of coordinator state for checkpoints: JSON structure plus NumPy arrays.

``encode(value)`` returns (a JSON-able tree, {name: array}); ``decode(tree, arrays)`` inverts it exactly:
arrays keep their dtype and bits, NumPy scalars come back as NumPy scalars of their dtype, floats as
the same float (JSON's ``repr`` round trip is exact), tuples as tuples. Dataclasses are written by
their class name and rebuilt only from ``state_types()``, the closed list of the classes the declared
algorithms and noise processes state (``AlgorithmDeclaration.state_types``,
``NoiseDeclaration.state_types``): decoding never imports a module or calls anything else, and arrays
are read with ``allow_pickle=False``. That is the difference from pickle, where loading a file runs
whatever code it names.

An algorithm or noise process that gains a state class declares it (a checkpoint naming an undeclared
type is refused, so forgetting it fails loudly in the durability tests).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import dpstream.algorithms  # noqa: F401  (each algorithm module declares itself)
import dpstream.noise  # noqa: F401  (each noise process module declares itself)
from dpstream.algorithms.registry import declarations
from dpstream.noise.registry import noise_declarations

__all__ = ["encode", "decode", "state_types", "StateFormatError"]


class StateFormatError(ValueError):
    """The encoded state names something this version cannot rebuild."""


def state_types() -> dict[str, type]:
    """The state classes a checkpoint may hold, by class name: those the declared algorithms and noise
    processes state. Two different classes of one name are refused (a name must rebuild one class)."""
    declared = [cls for entry in (*declarations(), *noise_declarations()) for cls in entry.state_types]
    by_name: dict[str, type] = {}
    for cls in declared:
        if by_name.setdefault(cls.__name__, cls) is not cls:
            raise StateFormatError(
                f"two declared state types are named {cls.__name__!r}: {by_name[cls.__name__].__module__} and "
                f"{cls.__module__}; rename one"
            )
    return by_name


def encode(value: Any) -> tuple[Any, dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {}
    known = state_types()

    def store(array: np.ndarray) -> str:
        if array.dtype.hasobject:
            raise StateFormatError(f"an object array cannot be checkpointed without pickle: {array.dtype}")
        name = f"a{len(arrays)}"
        arrays[name] = array
        return name

    def walk(item: Any) -> Any:
        if item is None or isinstance(item, (bool, int, float, str)) and not isinstance(item, np.generic):
            return item
        if isinstance(item, np.ndarray):
            return {"__array__": store(item)}
        if isinstance(item, np.generic):
            return {"__scalar__": store(np.asarray(item))}
        if isinstance(item, bytes):
            return {"__bytes__": store(np.frombuffer(item, dtype=np.uint8).copy())}
        if isinstance(item, tuple):
            return {"__tuple__": [walk(part) for part in item]}
        if isinstance(item, list):
            return [walk(part) for part in item]
        if isinstance(item, dict) and all(isinstance(k, str) for k in item):
            return {"__dict__": {k: walk(v) for k, v in item.items()}}
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            name = type(item).__name__
            if known.get(name) is not type(item):
                raise StateFormatError(
                    f"{type(item).__module__}.{name} is not a declared state type; add it to the state_types "
                    "of its algorithm's or noise process's declaration"
                )
            fields = {f.name: walk(getattr(item, f.name)) for f in dataclasses.fields(item)}
            return {"__type__": name, "fields": fields}
        raise StateFormatError(f"cannot checkpoint a value of type {type(item).__name__}")

    return walk(value), arrays


def decode(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    known = state_types()

    def array(name: Any) -> np.ndarray:
        if not isinstance(name, str) or name not in arrays:
            raise StateFormatError(f"the state refers to a missing array {name!r}")
        return arrays[name]

    def walk(item: Any) -> Any:
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        if isinstance(item, list):
            return [walk(part) for part in item]
        if not isinstance(item, dict):
            raise StateFormatError(f"unexpected value of type {type(item).__name__} in the state")
        if "__array__" in item:
            return array(item["__array__"])
        if "__scalar__" in item:
            return array(item["__scalar__"])[()]
        if "__bytes__" in item:
            return array(item["__bytes__"]).tobytes()
        if "__tuple__" in item:
            return tuple(walk(part) for part in item["__tuple__"])
        if "__dict__" in item:
            return {k: walk(v) for k, v in item["__dict__"].items()}
        if "__type__" in item:
            cls = known.get(item["__type__"])
            if cls is None:
                raise StateFormatError(
                    f"the state names type {item['__type__']!r}, which this dpstream version does not know"
                )
            return cls(**{k: walk(v) for k, v in item["fields"].items()})
        raise StateFormatError(f"unexpected object with keys {sorted(item)} in the state")

    return walk(tree)
