"""The RAS family: AMD's CPER records (family.py), each judged by cper.py with AMD's AFID table (afid_catalog.py)."""
