"""The Qt dashboard: renders Snapshots, never calls a server or NVML itself."""
