"""Fitting the analytic model to measurements: calibration profiles from microbenchmarks, the
free parameters from measured runs, and which cluster each run ran on."""
