"""What owners and the miner share, in layers: data <- trees <- privacy <- mechanisms <- audit <- study <- federation
(docs/architecture.md). Imports nothing from the node packages.

This folder is the package ``modelshare.common`` (``modelshare/common`` links to it) and is imported only by that
name: imported as ``common`` from a source checkout it raises ImportError, so no module is ever loaded twice.
"""

if __name__ != "modelshare.common":
    raise ImportError(f"import modelshare.common, not {__name__}: the folder common/ is installed and imported only as "
                      "modelshare.common (docs/architecture.md)")
