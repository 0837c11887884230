"""The learned surrogate: LightGBM corrections of the analytic model, the physics (parameter
sets) they are trained against, their features, training data, domain of applicability,
intervals and saved files."""
