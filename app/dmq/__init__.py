"""Rock-DMQ service mode: the inner message format, the inner topic's listener and `rocksidecar dmq`."""
