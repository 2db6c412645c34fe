"""The run secret stays secret, and keyed draws replay bit-for-bit, also in another process."""

import pickle
import subprocess
import sys

import numpy as np
import pytest

from dpstream.noise import NoiseKey, gaussian


def test_keys_come_from_entropy_and_differ():
    a, b = NoiseKey.generate(), NoiseKey.generate()
    assert a != b
    assert a.key_id != b.key_id
    assert not np.array_equal(gaussian(a, 0, "g", 8), gaussian(b, 0, "g", 8))


def test_secret_never_shown():
    key = NoiseKey.generate()
    secret = key.export_secret()
    shown = [repr(key), str(key), f"{key}", f"{key!r}", f"{key:>40}", repr([key]), repr({"k": key})]
    for text in shown:
        assert "redacted" in text
        assert secret.hex() not in text
        assert secret.hex().upper() not in text
        assert repr(secret) not in text


def test_key_refuses_pickling():
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(NoiseKey.generate())


def test_bad_secret_rejected():
    with pytest.raises(ValueError, match="32 bytes"):
        NoiseKey(b"short")


def test_draws_are_deterministic_and_distinct():
    key = NoiseKey.generate()
    first = gaussian(key, 7, "gradient", 1000)
    assert np.array_equal(first, gaussian(key, 7, "gradient", 1000))
    assert np.array_equal(first, gaussian(NoiseKey.from_secret(key.export_secret()), 7, "gradient", 1000))
    assert not np.array_equal(first, gaussian(key, 8, "gradient", 1000))
    assert not np.array_equal(first, gaussian(key, 7, "dpstat", 1000))
    # Prefixes agree: a shorter draw is the head of a longer one (same counter stream).
    assert np.array_equal(first[:10], gaussian(key, 7, "gradient", 10))


def test_draws_are_standard_normal():
    key = NoiseKey.generate()
    sample = np.concatenate([gaussian(key, step, "g", 10_000) for step in range(20)])
    n = sample.size
    # Mean within 5 standard errors; variance within 5 standard errors of a chi-square.
    assert abs(sample.mean()) < 5 / np.sqrt(n)
    assert abs(sample.var() - 1) < 5 * np.sqrt(2 / n)


@pytest.mark.parametrize("step", [-1, 2**63, 1.5])
def test_bad_step_rejected(step):
    with pytest.raises(ValueError, match="step"):
        gaussian(NoiseKey.generate(), step, "g", 3)


def test_replay_identical_in_another_process():
    key = NoiseKey.generate()
    here = gaussian(key, 123, "gradient", 64)
    program = (
        "import sys, numpy as np\n"
        "from dpstream.noise import NoiseKey, gaussian\n"
        "key = NoiseKey.from_secret(bytes.fromhex(sys.stdin.read().strip()))\n"
        "sys.stdout.buffer.write(gaussian(key, 123, 'gradient', 64).tobytes())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        input=key.export_secret().hex().encode(),
        capture_output=True,
        check=True,
    )
    assert np.frombuffer(result.stdout, dtype=np.float64).tobytes() == here.tobytes()
