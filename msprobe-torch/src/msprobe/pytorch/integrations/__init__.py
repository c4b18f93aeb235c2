"""Dumps driven by training frameworks' own callbacks: HuggingFace's Trainer and PyTorch Lightning."""
