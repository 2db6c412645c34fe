"""Model kinds, declared once: what each ``[model] kind`` is, read by every layer instead of comparing names.

A ``ModelKind`` states the kind's name, its task (regression or classification), how many classes it
takes (its label contract), the settings it reads from a config's ``[model]`` section or a model.json,
the algorithms it trains with and the defaults of the training settings it tunes (``TrainingDefaults``,
read by ``dpstream.algorithms.builder``, the config and the estimators), and how to build its
``dpstream.models`` model; the task gives the
evaluation metric beside its baseline (RMSE beside the label mean, accuracy beside the majority class)
and the prediction output (the label in its units; the class in its original spelling and one
probability per class). The config (``dpstream.flows.config.pipeline``), validation
(``dpstream.pipelines.validation.validate``), the flow's evaluation, model.json (``dpstream.export``) and ``dpstream predict``
all read the declaration.

The declaration itself and the registry are in ``dpstream.models.kinds.base``. A new kind is one module in
this package that builds a ``ModelKind`` and passes it to ``base.register``, plus its import below (and an
estimator where it needs one).
"""

from dpstream.models.kinds import kan, linear, logistic  # noqa: F401  (each registers its kind)
