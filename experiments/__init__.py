"""Paper reproductions behind `modelshare experiment`: one module per experiment."""
