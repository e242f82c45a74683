"""The miner: gRPC service, verification and re-audit, durable
store, study lifecycle, PGEN, mining tasks, global models.

This folder is the package ``modelshare.miner_node`` (``modelshare/miner_node`` links to it) and is imported only by
that name: imported as ``miner_node`` from a source checkout it raises ImportError, so no module is ever loaded twice.
"""

if __name__ != "modelshare.miner_node":
    raise ImportError(f"import modelshare.miner_node, not {__name__}: the folder miner_node/ is "
                      "installed and imported only as modelshare.miner_node (docs/architecture.md)")
