"""Fitting the analytic model to measurements: calibration profiles from microbenchmarks and
the free parameters from measured runs."""
