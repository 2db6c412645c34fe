"""Checkpoint format 2: JSON + arrays in one npz, rebuilt bit for bit, and loading runs no code."""

from __future__ import annotations

import io
import json
import pickle
import zipfile

import numpy as np
import pytest

from dpstream.algorithms import DPAMBSSGD, DPSGD, AcceleratedDPSRGD, AdaSSP
from dpstream.checkpoint import CheckpointError, CheckpointPolicy, CheckpointStore, new_checkpoint
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import LinearRegressionModel
from dpstream.noise import NoiseKey, make_noise_process
from dpstream.state_codec import StateFormatError, decode, encode

ROWS, DIM = 6_000, 4


def data(seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (ROWS, DIM))
    return X, np.clip(X @ np.full(DIM, 0.3) + 0.1 * rng.standard_normal(ROWS), -1, 1)


ALGORITHMS = {
    "dpsgd-nu": DPSGD(
        1.0,
        1e-6,
        1.0,
        learning_rate=0.2,
        batch_size=500,
        noise=make_noise_process("nu", nu=0.1),
        averaging="tail",
    ),
    "dpsgd-lambda": DPSGD(
        1.0, 1e-6, 1.0, learning_rate=0.2, batch_size=500, noise=make_noise_process("lambda", correlation=0.5)
    ),
    "srgd": AcceleratedDPSRGD(1.0, 1e-6, batch_size=500),
    "ambssgd": DPAMBSSGD(1.0, 1e-6, bound=10.0, statistic="gradient_norm", num_steps=3),
    "ssp": AdaSSP(1.0, 1e-6),
}


def same(a, b) -> bool:
    """Structural equality with arrays compared bit for bit (dtype included) and scalar types kept."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dataclass_fields__"):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return a == b or (a != a and b != b)  # NaN equals itself here


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_state_round_trips_bit_for_bit_through_a_checkpoint(tmp_path, name):
    X, y = data()
    states = []
    run(
        ALGORITHMS[name],
        InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
        num_rows=ROWS,
        num_params=DIM,
        initial_params=np.zeros(DIM),
        key=NoiseKey.generate(),
        on_step=lambda step, state: states.append(state),
    )
    store = CheckpointStore(CheckpointPolicy(str(tmp_path)))
    for index, state in enumerate(states):
        key = NoiseKey.generate()
        store.save(new_checkpoint(f"r{index}", "fp", index, state, key, [0.5, float("nan")]))
        loaded = store.load(f"r{index}")
        assert same(loaded.state, state), (name, index)
        assert loaded.key.export_secret() == key.export_secret() and loaded.step == index
        assert loaded.training_loss[0] == 0.5 and np.isnan(loaded.training_loss[1])
    assert (tmp_path / "r0" / "checkpoint.npz").exists() and not list(tmp_path.rglob("*.pkl"))


def test_scalars_keep_their_numpy_type_and_bits():
    value = (
        np.float64(0.1) + np.float64(0.2),
        np.int64(7),
        0.30000000000000004,
        b"\x00\xff",
        {"k": [1, None]},
    )
    tree, arrays = encode(value)
    back = decode(json.loads(json.dumps(tree)), arrays)
    assert same(back, value) and type(back[0]) is np.float64 and type(back[1]) is np.int64


def test_unknown_types_are_refused_both_ways():
    class Foreign:
        pass

    with pytest.raises(StateFormatError, match="cannot checkpoint a value of type Foreign"):
        encode(Foreign())
    with pytest.raises(StateFormatError, match="object array"):
        encode(np.array([object()], dtype=object))
    with pytest.raises(StateFormatError, match="does not know"):
        decode({"__type__": "os.system", "fields": {}}, {})


def write_npz(path, **entries) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez(buffer, **entries)
    path.write_bytes(buffer.getvalue())


class Boom:
    def __reduce__(self):  # what a malicious pickle would run on load
        return (exec, ("raise SystemExit('code ran on load')",))


def test_loading_runs_no_code_and_refuses_what_it_cannot_rebuild(tmp_path):
    store = CheckpointStore(CheckpointPolicy(str(tmp_path)))
    secret = np.frombuffer(NoiseKey.generate().export_secret(), dtype=np.uint8)
    meta = {
        "format_version": 2,
        "run_id": "x",
        "fingerprint": "f",
        "step": 0,
        "training_loss": [],
        "created_at": "",
    }
    # A state naming a class outside the registry.
    document = {**meta, "state": {"__type__": "Popen", "fields": {}}}
    write_npz(
        tmp_path / "foreign" / "checkpoint.npz", meta=np.frombuffer(json.dumps(document).encode(), np.uint8)
    )
    with pytest.raises(CheckpointError, match="cannot be rebuilt: the state names type 'Popen'"):
        store.load("foreign")
    # An entry holding a pickled object: read with allow_pickle=False, so it is refused, never run.
    payload = np.empty(1, dtype=object)
    payload[0] = Boom()
    document = {**meta, "state": {"__array__": "a0"}}
    write_npz(
        tmp_path / "pickled" / "checkpoint.npz",
        meta=np.frombuffer(json.dumps(document).encode(), np.uint8),
        noise_secret=secret,
        state_a0=payload,
    )
    with pytest.raises(CheckpointError, match="cannot read the checkpoint .*allow_pickle"):
        store.load("pickled")
    # Not a zip at all.
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "checkpoint.npz").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(CheckpointError, match="cannot read the checkpoint"):
        store.load("garbage")


def test_a_version_1_pickle_checkpoint_is_refused_not_loaded(tmp_path):
    store = CheckpointStore(CheckpointPolicy(str(tmp_path)))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "checkpoint.pkl").write_bytes(pickle.dumps(Boom()))
    assert store.exists("old")  # a repeated run id with an old checkpoint still counts as checkpointed
    with pytest.raises(CheckpointError, match="old pickle format .* not loaded .*start a new run id"):
        store.load("old")
    assert zipfile.is_zipfile(io.BytesIO(b"")) is False  # sanity: the refusal did not parse the file
