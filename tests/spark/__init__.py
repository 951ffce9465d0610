"""Tests of the PySpark integration."""
