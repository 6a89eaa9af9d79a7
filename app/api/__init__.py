"""The sidecar's HTTP and gRPC APIs."""
