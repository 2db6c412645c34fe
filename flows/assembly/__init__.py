"""Assembly: from a validated config to what a run uses (its locations and claims, the prepared and
validated lake, the execution plan and the ledger)."""
