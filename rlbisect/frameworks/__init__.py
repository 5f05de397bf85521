"""Shipped adapters for the frameworks our users train with: ``trl/`` (TRL's GRPOTrainer), ``verl/`` (verl's actor update)."""
