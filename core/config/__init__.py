"""Configuration: the settings resolved once (flags > environment > config.toml > defaults) and the
paths.
"""
