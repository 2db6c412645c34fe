"""Lake files: listing, content identity and fingerprints, verified footers, and reading row ranges into
aligned arrays."""
