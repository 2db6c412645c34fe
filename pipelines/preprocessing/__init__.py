"""The public preprocessing of a table's rows: its description (``spec``, with the request for private
bounds in ``private_bounds``), its application to a batch (``rows``) and the compiled range map
(``range_map``). Applied as rows are read, and by ``dpstream convert`` (``dpstream.pipelines.conversion``)."""
