"""Tests of the dataset layer: reads, writes, DML, evolution, maintenance, fragments,
distributed jobs, interop with pylance."""
