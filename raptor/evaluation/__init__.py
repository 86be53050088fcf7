"""Evaluation: time-aware filtered ranks and metrics (`ranking`), significance tests between two systems (`stats`), seed aggregates (`summary`)."""
