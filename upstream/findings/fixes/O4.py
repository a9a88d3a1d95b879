"""Fix of O4: the corrected KV-offload store filter (store_filter.py), the
same patch as for O2, O3, O4 and O5: one filter fixes them all."""

USE = "store_filter"
