"""raptor-tkg: RAPTOR (reachability-aware pretraining) for RL-based multi-hop TKG forecasting.

The library is pure Python/NumPy/PyTorch/PyArrow; orchestration (Prefect, DVC, MLflow)
lives in ``tasks/`` and ``flows/`` and is never imported from here.
"""

__version__ = "0.1.0"
