"""The Frama-C/WP-verified native core (prefix_cache.c) and its cffi loader.

The C file is written from pyspec/search.py function for function and proved
by ``make verify-c``; never patch the C without re-running that proof.
"""
