"""Benchmarks: `make bench` runs every module here and prints the tables recorded in BENCHMARKS.md."""
