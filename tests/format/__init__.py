"""Tests of the format layer: files, pages, encodings, manifests, deletion files, protobufs
(no IO)."""
