"""Tests of the filter and SQL expression compilation, JSON functions."""
