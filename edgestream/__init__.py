"""edgestream: train models on data streaming from heterogeneous edge devices through Kafka."""
__version__ = "0.1.0"
