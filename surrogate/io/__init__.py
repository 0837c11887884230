"""Files and stores: opening a user's file, writing atomically, tables, data sources, output
checks, JSON values, SQLite and MLflow."""
