"""PySpark data source and jobs that publish through the sidecar over HTTP."""
