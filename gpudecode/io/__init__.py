"""Shard I/O: shard lists, the tar parser and the threaded reader."""
