"""junkyard.cluster fan and power daemon: fan zones follow GPU power read from the BMC."""

__version__ = "0.1.0"
