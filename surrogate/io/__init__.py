"""Files and stores: tables, data sources, output checks, JSON values, SQLite and MLflow."""
