"""Every public import path works in a fresh interpreter, in any order (no import cycles)."""

import subprocess
import sys

import pytest

PATHS = [
    "from dpstream.estimators.kan import DPKANClassifier",
    "from dpstream.estimators import DPKANClassifier, DPLinearRegression, DPLogisticRegression",
    "from dpstream.estimators.glm import DPLogisticRegression; from dpstream.estimators.kan import DPKANClassifier",
    "import dpstream.estimators.kan, dpstream.estimators.glm, dpstream.estimators.support",
    "from dpstream import DPLinearRegression, DPLogisticRegression, DPKANClassifier",
    "from dpstream.algorithms import DPAMBSSGD, DPSGD, AcceleratedDPSRGD, AdaSSP",
    "from dpstream.algorithms.builder import AlgorithmSpec, build_algorithm",
    "from dpstream.validation import check_budget, check_positive, check_probability",
    "from dpstream.bounds import PrivateBounds",
    "from dpstream.models import KANModel, LinearRegressionModel, LogisticRegressionModel",
    "from dpstream.privacy import Ledger, LifetimeBudget, BudgetExceededError",
    "from dpstream.noise import NoiseKey, make_noise_process",
    "from dpstream.coordinator import run",
    "from dpstream.checkpoint import CheckpointPolicy",
    "from dpstream.audit import audit_algorithm",
    "from dpstream.pipelines import LakeSpec, connect, shuffle_once, train_on_lake, validate_lake",
    "from dpstream.flows.cli.main import main",
    "from dpstream.flows.flows import train_flow",
]


@pytest.mark.parametrize("statement", PATHS)
def test_public_import_in_fresh_interpreter(statement):
    done = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_kan_estimator_is_the_same_class_from_both_paths():
    """One class from either path, a sibling of the GLM estimators on the shared single-pass fit."""
    code = (
        "from dpstream.estimators.kan import DPKANClassifier as A; from dpstream.estimators import DPKANClassifier as B;"
        "from dpstream.estimators import DPLogisticRegression as L, DPLinearRegression as R;"
        "from dpstream.estimators.base import SinglePassEstimator as S;"
        "from dpstream.estimators.support import ClassifierLabels as C;"
        "assert A is B and not issubclass(A, L) and not issubclass(A, R);"
        "assert issubclass(A, S) and issubclass(L, S) and issubclass(R, S) and issubclass(A, C) and issubclass(L, C)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_top_level_estimators_are_the_estimators_module_classes_and_load_lazily():
    code = (
        "import sys, dpstream; assert 'sklearn' not in sys.modules, 'import dpstream pulled scikit-learn';"
        "from dpstream import DPLinearRegression, DPKANClassifier; import dpstream.estimators as e;"
        "assert DPLinearRegression is e.DPLinearRegression and DPKANClassifier is e.DPKANClassifier;"
        "import pytest\nwith pytest.raises(AttributeError, match='no attribute'): dpstream.DPForest"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_cli_help_loads_no_heavy_library():
    """`dpstream --help` and argument errors answer at once: each command imports its libraries when it runs."""
    code = (
        "import sys, contextlib, io\nfrom dpstream.flows.cli.main import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
        "heavy = ('numpy', 'scipy', 'numba', 'pyarrow', 'pydantic', 'prefect', 'distributed', 'rich')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", (done.stdout, done.stderr[-2000:])
