"""Measured hardware speed the analytic model reads: calibration profiles and the fabric."""
