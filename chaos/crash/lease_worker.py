"""Entry point of the worker process of the lease campaigns (see leases.py)."""

from .leases import main_worker

if __name__ == "__main__":
    main_worker()
