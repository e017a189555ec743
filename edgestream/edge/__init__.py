"""The device side of model versions (docs/model-format.md): the format (`model_format`), a version made
runnable with ONNX Runtime (`onnx_model`), `ModelSubscriber` (`subscriber`) and stream inference (`infer`).
Nothing here imports torch: a device installs confluent-kafka, numpy and onnxruntime (README, "Devices")."""
