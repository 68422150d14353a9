"""Using the backend with training libraries (``huggingface``: Trainer and accelerate)."""
