"""The shuffle-once: immutable shuffled generations with a manifest, the scatter and gather tasks, the
per-person bounding of user-level runs, and reuse of an earlier generation."""
