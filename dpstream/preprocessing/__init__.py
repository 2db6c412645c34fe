"""DP transformers for what users put before a model in a scikit-learn ``Pipeline``: each fits with a
DP mechanism (or learns nothing from the rows), charges the same ``PrivacyBudget`` as the estimators,
and states ``privacy_report_``. A pipeline step that is neither raises a ``PrivacyLeakWarning`` at the
fit of every dpstream step after it (``dpstream.estimators.leaks``).

- ``DPStandardScaler``: noisy mean and standard deviation inside public or private bounds (``scaler``);
- ``DPSimpleImputer``: a public constant, or a noisy mean inside public bounds (``imputer``);
- ``DPOneHotEncoder``: one-hot over public categories (``encoder``).

The dpstream estimators map their features onto their public scale themselves (``feature_bounds``): a
scaler before them changes nothing they need; it is there for pipelines whose other steps want it.
"""

from dpstream.estimators.leaks import PrivacyLeakWarning
from dpstream.preprocessing.encoder import DPOneHotEncoder
from dpstream.preprocessing.imputer import DPSimpleImputer
from dpstream.preprocessing.scaler import DPStandardScaler

__all__ = ["DPStandardScaler", "DPSimpleImputer", "DPOneHotEncoder", "PrivacyLeakWarning"]
