"""Jigsaw Multilingual Toxic Comment Classification pipeline."""
