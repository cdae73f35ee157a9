"""Tiny Flower App for the deployment tests."""
