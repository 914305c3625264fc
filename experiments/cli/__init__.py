"""The ``kvfabric`` command line."""
