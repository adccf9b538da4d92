"""Offline tools for the predictor (never imported by the gateway): evaluation on
datasets (``evaluate``), cross-validation (``cv``) and the TF-IDF baseline."""
