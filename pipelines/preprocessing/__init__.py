"""Preprocessing as rows are read: the compiled conversion of raw columns (clip, impute, one-hot,
ranges), and ``dpstream convert`` with its bounds and config."""
