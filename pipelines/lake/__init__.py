"""Lakes: their description (``spec``: LakeSpec), their files (``files``: listing, stamps, content identity
and fingerprints) and reading row ranges (``blocks``: verified footers, aligned arrays, the footer cache)."""
