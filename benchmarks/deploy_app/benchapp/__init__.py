"""The Flower App of ``benchmarks/real_deployment.py``."""
