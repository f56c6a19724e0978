"""The Qt dashboard: renders Snapshots, never calls a server or NVML itself."""

# The panels by the names the command line and the exports give them (``kvmon screenshot --panel``, File ▸ Export)
# → the window's attribute holding each; Qt-free, so that ``--help`` can list them without loading Qt.
PANEL_ATTRS = {"header": "header", "speed-vs-context": "speed_context", "speed-over-time": "speed_time",
               "memory": "memory", "bandwidth": "bandwidth", "replies": "latency", "energy": "energy",
               "alerts": "alerts", "what-if": "whatif"}
