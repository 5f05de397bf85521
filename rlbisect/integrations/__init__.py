"""Integrations with training frameworks: their callbacks feed rlbisect's detectors and snapshots.

- ``transformers``  a TrainerCallback for transformers/TRL trainers (`pip install 'rlbisect[trl]'`)
"""
