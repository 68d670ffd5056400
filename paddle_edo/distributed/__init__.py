"""Distributed training: Fleet parameter-server jobs (ps.py) and collective data parallelism."""
