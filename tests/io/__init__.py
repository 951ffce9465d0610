"""Tests of the IO layer: object stores, the store conformance suite, faults, S3 interop."""
