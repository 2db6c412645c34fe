"""The ``dpstream convert`` command's data plane: a CSV converted into a new Parquet lake by the public
preprocessing (``dpstream.pipelines.preprocessing``), the rows spent on private bounds left out, and the
ready ``pipeline.toml`` written beside it."""
