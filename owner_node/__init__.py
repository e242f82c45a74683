"""The owner daemon: site policy, privacy budget, answering studies (train, release, sign), durable outbox.

This folder is the package ``modelshare.owner_node`` (``modelshare/owner_node`` links to it) and is imported only by
that name: imported as ``owner_node`` from a source checkout it raises ImportError, so no module is ever loaded twice.
"""

if __name__ != "modelshare.owner_node":
    raise ImportError(f"import modelshare.owner_node, not {__name__}: the folder owner_node/ is "
                      "installed and imported only as modelshare.owner_node (docs/architecture.md)")
