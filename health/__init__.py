"""Engine health monitoring and the recovery policy (see the health issue)."""
