"""Training the learned surrogate: tuning (optuna), fitting, evaluation and MLflow tracking.

A program that uses the ``surrogate`` library; ``surrogate train`` and ``surrogate evaluate``
are its command-line faces. optuna, matplotlib and mlflow are imported where they are used.
"""
