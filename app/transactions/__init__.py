"""Transactional messages through the sidecar (issue 29): the synced record of each transaction and the
coordinator that begins, decides and answers the brokers' check-backs from it."""
