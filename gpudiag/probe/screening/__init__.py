"""The screen family's probe: the record of the idle-time screens, read for the checks and metrics (part.py, the part
the collector finds by this package's name), and who uses a GPU right now, read ten times a second while a screen
runs so that it yields to a job (gpu_users.py; docs/screening.md).

This file imports nothing: the collector imports part.py only when a selected check judges the screens.
"""
