"""Tracing: W3C trace context carried on messages (``context``), and the hooks the API edges and the
deliveries call. Kept apart from the rest of app/ so the hot paths pay one dict lookup when no trace
context is given."""
