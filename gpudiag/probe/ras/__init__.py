"""The ras family's probe part (part.py): root's record of the AMD GPUs' CPER records, for a process that may not
read them itself."""
