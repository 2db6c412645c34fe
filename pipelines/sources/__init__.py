"""Sources: which version of a lake a run reads and its live files (Parquet folders, Delta and Iceberg
tables), each table format declared once in ``formats``."""
