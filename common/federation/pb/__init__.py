"""Generated from protos/modelshare/v1 by protos/generate.py; do not edit."""
