"""Generated from proto/modelir/v1 by `make gen`. Do not edit."""
