"""Tests of the blocking facade."""
