"""Engine health monitoring and the recovery policy.

It defines what it needs from the rest of the backend in `ports.py` and imports only `common`.
"""
