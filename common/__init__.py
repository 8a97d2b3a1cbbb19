"""What every room may import: request and configuration errors, config.pbtxt parameter parsing, the
tritonserver command line, and the vocabulary (request outcomes, health states). It imports no other room."""
