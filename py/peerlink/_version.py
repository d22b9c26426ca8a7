__version__ = "0.9.0"  # the repository's VERSION file (make test-install checks that they agree)
