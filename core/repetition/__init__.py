"""PURE: the repetition (loop) detectors."""
