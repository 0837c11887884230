"""The learned surrogate: LightGBM corrections of the analytic model, their features, training
data, domain of applicability and saved files."""
