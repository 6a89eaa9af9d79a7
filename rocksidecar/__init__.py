"""rocksidecar: the distribution's one top-level package.

The repository keeps its top-level folders (app/, rmq/, retry/, delay/, storage/, devbroker/, pipeline/);
this package holds them by relative links, so that they install and import as ``rocksidecar.app``,
``rocksidecar.rmq``, ... and never as top-level names that another distribution or a user's own
``app.py`` could shadow.
"""
