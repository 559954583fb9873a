"""opencode-autoretry: keeps long OpenCode sessions moving."""


def package_version() -> str:
    """The installed distribution's version: pyproject.toml is its one source."""
    from importlib import metadata  # here: `autoretry --help` never pays for it

    try:
        return metadata.version("opencode-autoretry")
    except metadata.PackageNotFoundError:
        return "unknown"
