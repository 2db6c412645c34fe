"""The train command's one-line summary of the held-out metric beside its baseline (``kinds.summarise``)."""

from dpstream.models.kinds.base import summarise

RMSE, MEAN = "held-out RMSE (non-private, operator only)", "held-out RMSE of the label mean (baseline)"
ACCURACY = "held-out accuracy (non-private, operator only)"
MAJORITY = "held-out accuracy of the majority class (baseline)"


def test_a_model_no_better_than_the_constant_predictor_is_called_out():
    """DP-AMBSSGD on 23,065 rows at 0.514 against the label mean's 0.479 must not be printed side by side
    without a word, as the classifier's one-class case already warns."""
    worse = summarise({RMSE: 0.514, MEAN: 0.479, "held-out rows": 900.0})
    assert "warning: no better than the label mean" in worse and "AdaSSP" in worse
    assert "warning" not in summarise({RMSE: 0.395, MEAN: 0.479, "held-out rows": 900.0})
    tied = summarise(
        {ACCURACY: 0.30, MAJORITY: 0.34, "held-out classes predicted": 3.0, "held-out rows": 9.0}
    )
    assert "warning: no better than the majority class" in tied
    one_class = summarise(
        {ACCURACY: 0.34, MAJORITY: 0.34, "held-out classes predicted": 1.0, "held-out rows": 9.0}
    )
    assert one_class.count("warning") == 1 and "predicts one class" in one_class
    assert "warning" not in summarise({ACCURACY: 0.63, MAJORITY: 0.34, "held-out classes predicted": 4.0})
