"""ethosweep."""
