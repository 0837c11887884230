"""The package's version, on its own so that any layer can read it (a saved model records it)
without importing the package's root, which names the public API of every layer."""

__version__ = "0.1.0"
