"""Tests of the commit handlers, transactions, conflicts and concurrent writers."""
