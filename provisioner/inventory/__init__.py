"""The inventory: reading it safely, the model, and its validation."""
