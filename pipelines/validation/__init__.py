"""Validation of a lake before anything is charged: schema and column checks, person ids, duplicated
content, and the cache that lets a shuffle reuse a validation."""
