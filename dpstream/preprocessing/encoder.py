"""``DPOneHotEncoder``: one-hot encoding over public categories.

scikit-learn's ``OneHotEncoder`` learns its categories from the rows by default: a category held by one
person appears in ``categories_`` and in the model's features, a release no accountant sees. Here the
categories are a parameter, from public knowledge (a schema, a codebook); fitting reads the rows only for
their number of columns, releases nothing and states ε = 0. Values outside the categories encode as all
zeros (``handle_unknown="ignore"``), so neither fit nor transform depends on which values occur.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.preprocessing import OneHotEncoder
from sklearn.utils.validation import check_is_fitted

from dpstream.estimators.leaks import PrivatelyFitted, pipeline_leaks
from dpstream.estimators.parameters import Options, check_parameters
from dpstream.preprocessing.base import release_report

__all__ = ["DPOneHotEncoder"]


class DPOneHotEncoder(PrivatelyFitted, TransformerMixin, BaseEstimator):
    """One-hot encode each column over its public ``categories`` (module docstring).

    Parameters
    ----------
    categories : list of lists
        The public categories of each column, in order.
    drop : {"first", "if_binary"} or None, default None
        As in ``OneHotEncoder`` (decided by the public categories alone).
    sparse_output : bool, default False
    dtype : number type, default np.float64

    Attributes: ``categories_``, ``privacy_report_`` (ε = 0: nothing released).
    """

    _parameter_constraints: dict = {
        "categories": [list, tuple],
        "drop": [Options({"first", "if_binary"}), None],
        "sparse_output": ["boolean"],
        "dtype": [type],
    }

    def __init__(
        self,
        categories: list[list[Any]] | None = None,
        *,
        drop: str | None = None,
        sparse_output: bool = False,
        dtype: type = np.float64,
    ):
        self.categories = categories
        self.drop = drop
        self.sparse_output = sparse_output
        self.dtype = dtype

    def fit(self, X: Any, y: Any = None) -> DPOneHotEncoder:
        if self.categories is None or isinstance(self.categories, str):
            raise ValueError(
                "DPOneHotEncoder needs the public categories of every column, categories=[[...], ...]: learning "
                "them from the rows (OneHotEncoder's 'auto') would release which values occur"
            )
        check_parameters(self)
        leaks = pipeline_leaks(self)
        self.encoder_ = OneHotEncoder(
            categories=[list(column) for column in self.categories],
            drop=self.drop,
            sparse_output=self.sparse_output,
            dtype=self.dtype,
            handle_unknown="ignore",
        ).fit(X)
        self.n_features_in_ = self.encoder_.n_features_in_
        if hasattr(self.encoder_, "feature_names_in_"):
            self.feature_names_in_ = self.encoder_.feature_names_in_
        self.categories_ = self.encoder_.categories_
        report = release_report("no release: the categories are public", "replace-one", 0.0, 0.0, None, 0)
        self.privacy_report_ = dataclasses.replace(report, notes=leaks.notes)
        return self

    def transform(self, X: Any) -> Any:
        check_is_fitted(self, "encoder_")
        return self.encoder_.transform(X)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        check_is_fitted(self, "encoder_")
        return self.encoder_.get_feature_names_out(input_features)
