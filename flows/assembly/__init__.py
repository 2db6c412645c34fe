"""Assembly: from a validated config to what a run uses (the config loaded and checked, the data plane's
inputs it describes, its locations and claims, the cluster, the prepared and validated lake, the
execution plan and the ledger)."""
