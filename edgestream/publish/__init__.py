"""Model versions of a real run (docs/model-format.md): `export` (a torch model -> model.onnx and
model.safetensors), `metrics` (what a version says of the run's figures), `publisher` (`ModelPublisher`: the run
directory's models/v<N>/ and the models topic). The device side, which needs no torch, is edgestream.edge."""
