"""The conformance runner that replays the golden wire fixtures (`conformance/README.md` has the format)."""
