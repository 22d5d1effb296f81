"""The active family: what the load tests (`gpudiag check --level 2`) measured, judged against what the hardware should
do. family.py declares the family and judges the copy bandwidths and the memory test, against what each link should
carry (links.py); the power stress and the HBM copy are judged in stress.py (over the figures stress_figures.py
reduces a run's telemetry to), the computed bits in compute.py, and what they share in common.py."""
