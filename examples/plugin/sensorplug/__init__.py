"""sensorplug: an example edgestream plugin (a model, a dataset and an algorithm of its own)."""
