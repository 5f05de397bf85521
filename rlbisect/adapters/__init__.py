"""Shipped adapters for real trainers: wrap a trainer you built, check it with its own code.

- ``trl``  TRL's GRPOTrainer (`pip install 'rlbisect[trl]'`); ``trl:demo`` a tiny one built in code
"""
